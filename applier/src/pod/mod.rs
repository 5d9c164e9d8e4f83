//! The pod watch ([`watch`]): the pods of this node from the API server, each passed to the
//! translator's [`koord_translator::pod::apply::Applier`], its Event sent, and the node
//! features (NRI, the ancestors' protection, the QoS-class parents) told.

pub mod watch;
