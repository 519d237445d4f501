//! The per-address share of a port's connections (the API's `--max-connections-per-address`,
//! the webhook's `--intercept-max-connections-per-address`): one client address may hold only
//! so many connections at once, so a single host cannot take every slot of the port's cap and
//! lock the others out. The count lives as long as the connections:
//! an address's entry goes when its last connection closes, so the map never holds more
//! entries than there are open connections.
//!
//! Hand-written: a counter per key that is released by a guard; no crate does only that.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`), as a client on a dual-stack socket is
/// seen, as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Open connections per client address, each at most `per_address`.
#[derive(Debug)]
pub struct AddressSlots {
    per_address: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One connection's hold on its address's share; released on drop.
#[derive(Debug)]
pub struct AddressSlot {
    slots: Arc<AddressSlots>,
    addr: IpAddr,
}

impl AddressSlots {
    /// At most `per_address` connections from one address.
    pub fn new(per_address: usize) -> Arc<Self> {
        Arc::new(Self {
            per_address,
            open: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for a connection from `addr`, or `None` when that address holds its share.
    pub fn try_acquire(self: &Arc<Self>, addr: IpAddr) -> Option<AddressSlot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(canonical(addr)).or_insert(0);
        if *count >= self.per_address {
            return None;
        }
        *count += 1;
        Some(AddressSlot {
            slots: self.clone(),
            addr: canonical(addr),
        })
    }

    /// Addresses with at least one open connection.
    pub fn addresses(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.addr) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.addr);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn an_address_gets_its_share_and_no_more_while_others_still_connect() {
        let slots = AddressSlots::new(2);
        let a1 = slots.try_acquire(ip("10.0.0.1")).unwrap();
        let _a2 = slots.try_acquire(ip("10.0.0.1")).unwrap();
        assert!(slots.try_acquire(ip("10.0.0.1")).is_none());
        let _b = slots.try_acquire(ip("10.0.0.2")).expect("another address");
        drop(a1);
        assert!(slots.try_acquire(ip("10.0.0.1")).is_some(), "a slot freed");
    }

    #[test]
    fn an_address_is_forgotten_when_its_last_connection_closes() {
        let slots = AddressSlots::new(3);
        let held: Vec<_> = (0..3)
            .map(|_| slots.try_acquire(ip("10.0.0.1")).unwrap())
            .collect();
        assert_eq!(slots.addresses(), 1);
        drop(held);
        assert_eq!(slots.addresses(), 0);
    }

    #[test]
    fn an_ipv4_client_on_a_dual_stack_socket_shares_its_ipv4_count() {
        let slots = AddressSlots::new(1);
        let _v4 = slots.try_acquire(ip("10.0.0.1")).unwrap();
        assert!(slots.try_acquire(ip("::ffff:10.0.0.1")).is_none());
        assert!(slots.try_acquire(ip("2001:db8::1")).is_some());
    }
}
