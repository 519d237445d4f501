//! How a wait for a window's state ended, through the API or in direct mode.

use crate::operations::types::WindowView;

/// How a wait for a window's state ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited {
    /// The window reached the awaited state; its view then.
    Done(WindowView),
    /// It had not when the time was up; its view then.
    TimedOut(WindowView),
}
