"""Part of the SDK double of tests/neko_plugin/lifecycle.py: the package path upstream has (plugin.sdk.plugin)."""
