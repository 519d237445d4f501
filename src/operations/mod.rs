//! The window operations — open, read, list, renew, close — over `TestWindow` objects, with
//! their request and view types and the problem type their failures are. The HTTP API
//! ([`crate::api`]) serves them; the CI client ([`crate::client`]) calls them through the API
//! or, in its direct (`--kubeconfig`) mode, here.
//!
//! - [`windows`]: the operations themselves, each call to the API server bounded in time
//!   ([`deadline`]); [`open`]: the object an open creates, decided without the API server;
//!   [`ready`]: waiting until protection is in effect;
//! - [`types`]: the wire types (requests, the window view); [`view`]: a `TestWindow` as its
//!   view; [`selector`]: label selectors in requests; [`overlap`]: whether two of them can
//!   select a pod in common; [`ttl`]: a window's time to live;
//! - [`problem`]: errors as `application/problem+json`; [`daemon_sets`]: who may protect
//!   DaemonSet pods.

pub mod daemon_sets;
pub mod deadline;
pub mod open;
pub mod overlap;
pub mod problem;
pub mod ready;
pub mod selector;
pub mod ttl;
pub mod types;
pub mod view;
pub mod windows;
