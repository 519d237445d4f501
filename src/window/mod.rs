//! The window controller: protects the pods an open `TestWindow` selects and releases the
//! protection when the window closes, expires or is deleted.
