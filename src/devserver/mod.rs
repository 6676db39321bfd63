//! The stand-in main_server: the tool API of ../shared/CONTRACT.md, with fault injection.
