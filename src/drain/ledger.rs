//! What this process already did per (workload, node): a rollout is made once per
//! (Deployment uid, node uid), and a skip is reported (Event, metric) once per reason. The
//! Deployment annotation `disruption-guard.io/rolled-out-for-node` carries the rollout across
//! restarts; this map only saves the round trip and de-duplicates skip reports. A node's
//! entries go when the node goes or its disruption ends, so a later disruption of the same
//! node is handled afresh (the annotation still stops a second rollout for the same node in a
//! row).

use std::collections::HashMap;

use super::decide::SkipReason;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    RolledOut,
    Skipped(SkipReason),
}

/// Outcomes keyed by (workload uid, node uid).
#[derive(Debug, Default)]
pub struct Ledger {
    outcomes: HashMap<(String, String), Outcome>,
}

impl Ledger {
    /// Whether the Deployment was rolled out for the node by this process.
    pub fn rolled_out(&self, workload_uid: &str, node_uid: &str) -> bool {
        self.outcomes.get(&key(workload_uid, node_uid)) == Some(&Outcome::RolledOut)
    }

    /// Records a rollout.
    pub fn note_rollout(&mut self, workload_uid: &str, node_uid: &str) {
        self.outcomes
            .insert(key(workload_uid, node_uid), Outcome::RolledOut);
    }

    /// Records a skip; true when it is news (first time, or another reason than last time)
    /// and so worth an Event and a count.
    pub fn note_skip(&mut self, workload_uid: &str, node_uid: &str, reason: SkipReason) -> bool {
        let new = Outcome::Skipped(reason);
        self.outcomes.insert(key(workload_uid, node_uid), new) != Some(new)
    }

    /// Forgets a node that is gone or no longer disrupted.
    pub fn forget_node(&mut self, node_uid: &str) {
        self.outcomes.retain(|(_, node), _| node != node_uid);
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.outcomes.is_empty()
    }
}

fn key(workload_uid: &str, node_uid: &str) -> (String, String) {
    (workload_uid.to_string(), node_uid.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_news_once_per_reason() {
        let mut ledger = Ledger::default();
        assert!(ledger.note_skip("d", "n", SkipReason::Paused));
        assert!(!ledger.note_skip("d", "n", SkipReason::Paused));
        assert!(ledger.note_skip("d", "n", SkipReason::RolloutInProgress));
        assert!(ledger.note_skip("d", "other-node", SkipReason::RolloutInProgress));
    }

    #[test]
    fn a_rollout_is_remembered_per_deployment_and_node_until_the_node_goes() {
        let mut ledger = Ledger::default();
        ledger.note_rollout("d", "n");
        assert!(ledger.rolled_out("d", "n"));
        assert!(!ledger.rolled_out("d", "m"));
        assert!(!ledger.rolled_out("e", "n"));
        ledger.forget_node("n");
        assert!(!ledger.rolled_out("d", "n"));
        assert!(ledger.is_empty());
    }
}
