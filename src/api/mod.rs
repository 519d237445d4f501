//! The HTTP API that CI calls to open, renew, read and close test windows.
