//! One pass over one namespace: gather (from the caches) → decide (pure: [`super::plan`] over
//! all its windows, [`super::status`] per window) → apply (the namespace's writes, once per
//! object) → each window's status and Events. Opening, closing, expiry and deletion are the
//! same computation: a window that is not Active wants nothing, so what only it wanted is
//! released, and what others still want is left as it is.
//!
//! A pass that would remove protection first reads the namespace's windows from the API server
//! and decides again from them: a window cache that lags never releases a live window's pods,
//! and a window that cannot be read (what it selects is unknown) holds every release back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, stream};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::json;
use tracing::{debug, info, warn};

use super::context::Context;
use super::error::Error;
use super::events::{Decided, write_statuses};
use super::limits;
use super::plan::{self, NamespacePlan, WindowFacts, WindowPlan, World, Write};
use super::settling;
use super::timing::{self, Timing};
use super::unseen::{self, Made};
use crate::resources::names::{FINALIZER, namespace_field_manager};
use crate::resources::{Phase, TestWindow, TestWindowStatus};
use crate::runtime::Scope;
use crate::runtime::write::is_code;

/// How long a pass waits for the first list of its namespace's pods.
const NAMESPACE_PODS_SYNC: Duration = Duration::from_secs(30);

/// How many writes of one pass run at once.
const WRITE_CONCURRENCY: usize = 16;

/// Reconciles a namespace; failures become a Warning Event on its windows, a metric and a
/// requeue. Passes the gates turn away (out of scope, not the leader) are not timed: they do
/// nothing.
pub async fn reconcile(key: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action, Error> {
    let ns = key.name_any();
    if !ctx.runtime.in_scope(&ns) {
        return Ok(Action::await_change());
    }
    // Only the Lease holder writes; a follower looks again soon, so a takeover acts at once.
    if !ctx.runtime.leader.is_leader() {
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // A namespace with nothing of the guard's to look at (its last window gone and released)
    // needs no pass, and its pods no cache.
    if !ctx.concerns(&ns) {
        debug!(namespace = %ns, "nothing of the guard's here: the namespace's pods are not cached");
        ctx.stores.pods.release(&Scope::Namespace(ns));
        return Ok(Action::await_change());
    }
    // The namespace's pods are cached from its first window on; its first pass waits for
    // their list (at most [`NAMESPACE_PODS_SYNC`]).
    let scope = Scope::Namespace(ns.clone());
    if !ctx.stores.pods.synced(scope, NAMESPACE_PODS_SYNC).await {
        debug!(namespace = %ns, "the namespace's pods are not listed yet");
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    let started = Instant::now();
    let result = pass(&ns, &ctx).await;
    ctx.metrics
        .reconcile_durations
        .observe(result.is_ok(), started.elapsed());
    if let Err(err) = &result {
        ctx.metrics.error(err.category());
        warn!(namespace = %ns, category = err.category(), error = %err, "reconcile failed");
        for window in ctx.windows_in(&ns).iter().filter(|w| !settled(w)) {
            ctx.publish(
                window,
                EventType::Warning,
                "ReconcileFailed",
                err.to_string(),
            );
        }
    }
    result
}

/// Whether a window's pass has nothing left to do: it ended, released, and is not deleted.
fn settled(window: &TestWindow) -> bool {
    !deleted(window)
        && window
            .status
            .as_ref()
            .is_some_and(TestWindowStatus::is_released)
}

/// The requeue after a failure: quick for conflicts, slower for the rest.
pub fn error_policy(_key: Arc<Namespace>, err: &Error, _ctx: Arc<Context>) -> Action {
    if err.is_conflict() {
        Action::requeue(Duration::from_millis(100))
    } else {
        Action::requeue(Duration::from_secs(2))
    }
}

/// The windows of `ns` as decided at `now`, and the namespace's plan.
fn decide(
    ctx: &Context,
    ns: &str,
    windows: &[Arc<TestWindow>],
    world: &World,
    now: Timestamp,
) -> (Vec<Decided>, NamespacePlan) {
    let args = &ctx.args;
    let mut decided = Vec::with_capacity(windows.len());
    let mut refusals = Vec::with_capacity(windows.len());
    for window in windows {
        let timing = timing::decide(window, now, args.max_ttl_signed());
        let active = timing.phase == Phase::Active && window.metadata.deletion_timestamp.is_none();
        let mut facts = WindowFacts::of(window, active, timing.expires_at);
        let refused = active
            .then(|| limits::restrict(window, &mut facts, windows, world, args, now))
            .flatten();
        refusals.push(refused);
        decided.push(Decided {
            previous: ctx.previous_status(window),
            window: window.clone(),
            timing,
            facts,
        });
    }
    let facts: Vec<WindowFacts> = decided.iter().map(|d| d.facts.clone()).collect();
    let mut plan = plan::plan(ns, &facts, world);
    for ((view, refused), d) in plan.windows.iter_mut().zip(refusals).zip(&decided) {
        view.refused = refused;
        if d.facts.active && d.previous.ready_at.is_none() {
            let opened = d.timing.opened_at;
            let moving = settling::unsettled(&d.facts, world, &ctx.signals, opened, now);
            view.waiting.extend(moving);
        }
    }
    (decided, plan)
}

/// The pass: see the module's documentation.
async fn pass(ns: &str, ctx: &Context) -> Result<Action, Error> {
    let now = Timestamp::now();
    let world = ctx.world(ns);
    let (mut decided, mut plan) = decide(ctx, ns, &ctx.windows_in(ns), &world, now);
    let mut held = false;
    if plan.releases() {
        let (windows, unreadable) = ctx.fresh_windows(ns).await.map_err(|source| Error::Write {
            what: "a fresh read of the namespace's windows".into(),
            source,
        })?;
        (decided, plan) = decide(ctx, ns, &windows, &world, now);
        held = unreadable && plan.releases();
        if held {
            warn!(namespace = %ns, "a window of the namespace cannot be read: nothing is released");
            plan.writes.retain(|w| !w.releases());
        }
    }
    // A window made with kubectl gets the finalizer (the API creates windows with it) before
    // anything is written for it.
    for window in decided.iter().map(|d| &d.window) {
        if !deleted(window) && !has_finalizer(window) {
            set_finalizer(ctx, window, true).await?;
        }
    }
    for (view, d) in plan.windows.iter_mut().zip(&decided) {
        view.writes.clone_from(&plan.writes);
        if held && !d.facts.active {
            view.waiting
                .push("a window of the namespace that cannot be read".into());
        }
    }

    // The end is recorded before the release (docs/windows.md, "Lifecycle"): whoever watches a
    // window sees it ended, `Ready` False for `Releasing`, before any protection goes, so a
    // window whose status says Active always protects what it selects.
    let ending: Vec<usize> = (0..decided.len())
        .filter(|&i| decided[i].timing.phase.is_final() && !decided[i].previous.phase.is_final())
        .filter(|&i| !deleted(&decided[i].window))
        .collect();
    if plan.releases() && !ending.is_empty() {
        let views = &plan.windows;
        write_statuses(ctx, &mut decided, views, &world, &ending, false, now).await?;
    }

    let (made, failure) = write_all(ctx, ns, &plan.writes).await;
    let rest = async {
        let written = failure.is_none();
        if written {
            plan.windows.iter_mut().for_each(|view| view.writes.clear());
        }
        let live: Vec<usize> = (0..decided.len())
            .filter(|&i| !deleted(&decided[i].window))
            .collect();
        let views = &plan.windows;
        write_statuses(ctx, &mut decided, views, &world, &live, written, now).await?;
        // A deleted window's finalizer goes once the writes that release what only it wanted
        // have succeeded.
        let released = written && !held;
        for window in decided.iter().map(|d| &d.window) {
            if released && deleted(window) && has_finalizer(window) {
                set_finalizer(ctx, window, false).await?;
                ctx.forget(window);
            }
        }
        if let Some(err) = failure {
            return Err(err);
        }
        let retention = ctx.args.retention_signed();
        for d in &decided {
            if !deleted(&d.window) && timing::retention_over(&d.timing, now, retention) {
                let name = d.window.name_any();
                info!(window = %name, "deleting ended window after its retention");
                let api = ctx.windows(&d.window);
                api.delete(&name, &DeleteParams::background())
                    .await
                    .map_err(Error::Delete)?;
            }
        }
        if decided.is_empty() && plan.writes.is_empty() {
            // Nothing of the guard's is left here: the namespace's pods need no cache.
            ctx.swept.lock().expect("swept lock").remove(ns);
            ctx.stores.pods.release(&Scope::Namespace(ns.to_string()));
            return Ok(Action::await_change());
        }
        let next = decided
            .iter()
            .zip(&plan.windows)
            .map(|(d, view)| requeue(&d.timing, view, now, retention))
            .min()
            .unwrap_or(Duration::from_secs(300));
        Ok(Action::requeue(next))
    };
    // The pass ends once the caches show its writes ([`unseen`]): the next pass over the
    // namespace plans from them.
    let (result, ()) = tokio::join!(rest, unseen::wait(|| ctx.world(ns), &made));
    result
}

fn deleted(window: &TestWindow) -> bool {
    window.metadata.deletion_timestamp.is_some()
}

fn has_finalizer(window: &TestWindow) -> bool {
    window.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the finalizer to the window's (`add`) or removes it; the resourceVersion read makes
/// the patch refused (409) if the list changed since.
async fn set_finalizer(ctx: &Context, window: &TestWindow, add: bool) -> Result<(), Error> {
    let others = window
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned();
    let next: Vec<String> = others.chain(add.then(|| FINALIZER.to_string())).collect();
    let patch = json!({"metadata": {
        "finalizers": next,
        "resourceVersion": window.metadata.resource_version,
    }});
    let params = PatchParams::default();
    match ctx
        .windows(window)
        .patch(&window.name_any(), &params, &Patch::Merge(&patch))
        .await
    {
        // A deleted window the cache still shows: its finalizer went in an earlier pass.
        Err(e) if !add && is_code(&e, 404) => Ok(()),
        other => other.map(|_| ()).map_err(Error::Finalizer),
    }
}

/// Makes the writes: the namespace's own first, in parallel, then the releases of an earlier
/// version's window managers (so an adopted object is never without protection). The writes
/// that succeeded, and the first failure, if any.
async fn write_all(ctx: &Context, ns: &str, writes: &[Write]) -> (Vec<Made>, Option<Error>) {
    let started = Instant::now();
    let manager = namespace_field_manager(ns);
    let (legacy, own): (Vec<&Write>, Vec<&Write>) = writes
        .iter()
        .partition(|w| matches!(w, Write::Annotate { manager: m, .. } if *m != manager));
    let (mut made, mut failure) = (vec![], None);
    for batch in [own, legacy] {
        let writing: Vec<_> = batch.iter().map(|w| ctx.writer.write(ns, w)).collect();
        let results: Vec<_> = stream::iter(writing)
            .buffered(WRITE_CONCURRENCY)
            .collect()
            .await;
        for (write, result) in batch.into_iter().zip(results) {
            match result {
                Ok(version) => made.push((write.clone(), version)),
                Err(err) => failure = failure.or(Some(err)),
            }
        }
        if failure.is_some() {
            break;
        }
    }
    ctx.metrics.reconciled(writes.len());
    debug!(
        namespace = ns,
        writes = writes.len(),
        ok = failure.is_none(),
        write_ms = started.elapsed().as_millis() as u64,
        "planned and wrote"
    );
    (made, failure)
}

/// When to look at a window again.
fn requeue(
    timing: &Timing,
    plan: &WindowPlan,
    now: Timestamp,
    retention: SignedDuration,
) -> Duration {
    if !plan.complete() {
        return Duration::from_secs(1);
    }
    // A limit may let go once other windows end: looked at again soon.
    if plan.refused.is_some() {
        return Duration::from_secs(5);
    }
    let until = |t: Timestamp| {
        let d = t.duration_since(now).max(SignedDuration::from_millis(50));
        Duration::try_from(d)
            .unwrap_or(Duration::from_secs(60))
            .min(Duration::from_secs(300))
    };
    match timing.phase {
        Phase::Active => until(timing.expires_at).min(Duration::from_secs(60)),
        _ => {
            let end = timing.ended_at.unwrap_or(now);
            until(end.saturating_add(retention).unwrap_or(Timestamp::MAX))
        }
    }
}
