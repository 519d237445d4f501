//! Readiness gates: each component registers the caches it waits for and marks them synced;
//! `/readyz` answers ready once every gate is synced and the process is not shutting down.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Readiness gates: each component registers a name and marks it synced.
#[derive(Debug, Default)]
pub struct Readiness {
    gates: Mutex<BTreeMap<&'static str, bool>>,
}

impl Readiness {
    /// Registers a gate that is not yet synced.
    pub fn register(&self, name: &'static str) {
        self.gates
            .lock()
            .expect("readiness lock")
            .entry(name)
            .or_insert(false);
    }

    /// Marks a gate synced.
    pub fn mark_synced(&self, name: &'static str) {
        let mut gates = self.gates.lock().expect("readiness lock");
        let was_ready = gates.values().all(|ok| *ok);
        gates.insert(name, true);
        let now_ready = gates.values().all(|ok| *ok);
        drop(gates);
        if !was_ready && now_ready {
            // Every initial list is parsed: their buffers can go back to the system.
            super::memory::release_free_pages();
        }
    }

    /// Names of gates that are not yet synced.
    pub fn pending(&self) -> Vec<&'static str> {
        let gates = self.gates.lock().expect("readiness lock");
        gates
            .iter()
            .filter(|(_, ok)| !**ok)
            .map(|(name, _)| *name)
            .collect()
    }
}
