//! The admin's limits on what one window may protect, applied to the window before it is
//! planned: who may protect DaemonSet pods (`--allow-daemon-sets-for`,
//! [`crate::operations::daemon_sets`]) and how many nodes the windows of one namespace may
//! hold at once (`--max-nodes-per-namespace`, [`super::node_cap`]). Pure: the window, the
//! namespace's other windows (from the cache) and the world in; what the window may protect
//! and, when a limit refused something, its `Ready=False` reason and message out.
//!
//! A window refused `protect.daemonSets` protects nothing at all (what it asked for is all or
//! nothing: a selection without its DaemonSet pods is not what its opener wanted). A window
//! past the node cap protects the units the cap admits, and keeps everything it held.

use std::sync::Arc;

use jiff::Timestamp;

use super::args::WindowArgs;
use super::model::{Refusal, WindowFacts, World};
use super::node_cap::{self, NODE_LIMIT};
use super::timing;
use crate::operations::daemon_sets;
use crate::resources::{Phase, TestWindow};

/// Whether `--allow-daemon-sets-for` refuses the window's `protect.daemonSets`; the message
/// when it does.
fn daemon_sets_refused(window: &TestWindow, args: &WindowArgs) -> Option<String> {
    if !window.spec.protect.daemon_sets {
        return None;
    }
    let policy = args.daemon_set_policy();
    policy.admits(window.spec.opened_by.as_ref()).err()
}

/// The facts of an Active window as the limits see them (a refused one selects nothing).
fn facts(window: &TestWindow, now: Timestamp, args: &WindowArgs) -> Option<WindowFacts> {
    let timing = timing::decide(window, now, args.max_ttl_signed());
    if timing.phase != Phase::Active {
        return None;
    }
    let mut facts = WindowFacts::of(window, true, timing.expires_at);
    if daemon_sets_refused(window, args).is_some() {
        facts.admitted = Some(Arc::default());
    }
    Some(facts)
}

/// Narrows `view` (the Active `window`) to what the limits let it protect, given the windows of
/// its namespace (`namespace_windows`, it among them or not); the refusal, if any.
pub fn restrict(
    window: &TestWindow,
    view: &mut WindowFacts,
    namespace_windows: &[Arc<TestWindow>],
    world: &World,
    args: &WindowArgs,
    now: Timestamp,
) -> Option<Refusal> {
    if let Some(message) = daemon_sets_refused(window, args) {
        view.admitted = Some(Arc::default());
        return Some(Refusal {
            reason: daemon_sets::REFUSED,
            message,
        });
    }
    let cap = args.max_nodes_per_namespace;
    if cap == 0 {
        return None;
    }
    let mut ordered: Vec<&TestWindow> = namespace_windows
        .iter()
        .map(|w| &**w)
        .filter(|w| w.metadata.uid != window.metadata.uid)
        .chain([window])
        .collect();
    ordered.sort_by_key(|w| {
        (
            w.metadata.creation_timestamp.clone(),
            w.metadata.name.clone(),
        )
    });
    let windows: Vec<WindowFacts> = ordered
        .into_iter()
        .filter_map(|w| facts(w, now, args))
        .collect();
    let admission = node_cap::admit(cap, &windows, &view.uid, world);
    let message = admission.refusal(cap)?;
    view.admitted = admission.pods.map(Arc::new);
    Some(Refusal {
        reason: NODE_LIMIT,
        message,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn args(allow: &[&str], cap: u32) -> WindowArgs {
        WindowArgs {
            max_ttl: Duration::from_secs(3600),
            retention: Duration::from_secs(3600),
            allow_daemon_sets_for: allow.iter().map(|a| a.to_string()).collect(),
            max_nodes_per_namespace: cap,
        }
    }

    fn window(opened_by: serde_json::Value) -> TestWindow {
        serde_json::from_value(json!({
            "apiVersion": "disruption-guard.io/v1alpha1", "kind": "TestWindow",
            "metadata": {"name": "agents", "namespace": "shop", "uid": "u1",
                "creationTimestamp": "2026-01-01T10:00:00Z"},
            "spec": {"ttl": "1h", "protect": {"daemonSets": true}, "openedBy": opened_by}
        }))
        .unwrap()
    }

    fn restricted(window: &TestWindow, args: &WindowArgs) -> (WindowFacts, Option<Refusal>) {
        let now: Timestamp = "2026-01-01T10:01:00Z".parse().unwrap();
        let mut view = WindowFacts::of(window, true, now);
        let refusal = restrict(window, &mut view, &[], &World::default(), args, now);
        (view, refusal)
    }

    #[test]
    fn a_window_refused_daemon_sets_protects_nothing_and_says_why() {
        let w = window(json!({"name": "system:serviceaccount:shop:ci"}));
        let (view, refusal) = restricted(&w, &args(&[], 20));
        let refusal = refusal.expect("refused");
        assert_eq!(refusal.reason, "DaemonSetsNotAllowed");
        assert!(
            refusal.message.starts_with("protect.daemonSets: "),
            "{}",
            refusal.message
        );
        assert_eq!(view.admitted.as_deref(), Some(&BTreeSet::new()));
    }

    #[test]
    fn an_allowed_identity_or_a_ci_trust_keeps_daemon_sets() {
        let w = window(json!({"name": "system:serviceaccount:shop:ci"}));
        let (view, refusal) = restricted(&w, &args(&["system:serviceaccount:shop:ci"], 20));
        assert_eq!((view.admitted, refusal), (None, None));
        let w = window(json!({"name": "oidc:https://ci#repo", "trust": "shop/main"}));
        let (view, refusal) = restricted(&w, &args(&[], 20));
        assert_eq!((view.admitted, refusal), (None, None));
    }
}
