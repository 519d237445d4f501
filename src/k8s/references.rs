//! References between objects: the controller among an object's owner references, and a
//! reference to an object for an Event.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

/// The controller owner reference of an object.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
}

/// A reference to an object, for an Event.
pub fn reference(meta: &ObjectMeta, api_version: &str, kind: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}
