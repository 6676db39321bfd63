//! Opening a link in the user's browser, where there is one: `xdg-open`
//! on a Linux or BSD desktop (a display is set), `open` on macOS, the
//! shell's `start` on Windows. On a server or in a container there is
//! none, and the caller says what to do instead.

/// Starts the browser on `url`; whether one was started.
pub(crate) fn open_browser(url: &str) -> bool {
    let Some(mut cmd) = command(url) else {
        return false;
    };
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    cmd.spawn().is_ok()
}

#[cfg(windows)]
fn command(url: &str) -> Option<std::process::Command> {
    // `start`'s first quoted argument is the window's title.
    let mut cmd = std::process::Command::new("cmd");
    cmd.args(["/c", "start", "", url]);
    Some(cmd)
}

#[cfg(target_os = "macos")]
fn command(url: &str) -> Option<std::process::Command> {
    let mut cmd = std::process::Command::new("open");
    cmd.arg(url);
    Some(cmd)
}

#[cfg(all(unix, not(target_os = "macos")))]
fn command(url: &str) -> Option<std::process::Command> {
    let display = ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if !display || which::which("xdg-open").is_err() {
        return None;
    }
    let mut cmd = std::process::Command::new("xdg-open");
    cmd.arg(url);
    Some(cmd)
}
