//! koord-applier: makes the webhook's decisions real on a node.
