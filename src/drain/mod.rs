//! The drain watcher: rolls out lone-replica Deployments whose pod sits on a node that is being
//! drained, so the replacement starts elsewhere before the old pod goes.
