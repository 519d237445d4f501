//! [`Stub`]: an object of a cached kind reduced to its identity, for telling a store to forget
//! an object whose current version the operator could not read ([`super::decoded`]). A store
//! finds what to remove by name and namespace alone, so nothing else of the stub is read.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};

use crate::resources::{CITrust, CITrustSpec, PodDigest, Protect, TestWindow, TestWindowSpec};

/// A kind whose objects can be made from metadata alone.
pub trait Stub: Resource + Sized {
    /// An object of this kind with `metadata` and nothing else set.
    fn stub(metadata: ObjectMeta, dt: &Self::DynamicType) -> Self;
}

/// The built-in kinds, whose every field has a default.
macro_rules! stub_by_default {
    ($($kind:ty),*) => {$(
        impl Stub for $kind {
            fn stub(metadata: ObjectMeta, _: &()) -> Self {
                Self { metadata, ..Self::default() }
            }
        }
    )*};
}

stub_by_default!(
    Node,
    Namespace,
    ReplicaSet,
    Deployment,
    StatefulSet,
    PodDisruptionBudget,
    PodDigest
);

impl<K: Resource<DynamicType = ()>> Stub for kube::core::PartialObjectMeta<K> {
    fn stub(metadata: ObjectMeta, _: &()) -> Self {
        Self {
            types: None,
            metadata,
            _phantom: std::marker::PhantomData,
        }
    }
}

impl Stub for DynamicObject {
    fn stub(metadata: ObjectMeta, dt: &ApiResource) -> Self {
        Self {
            metadata,
            ..DynamicObject::new("", dt)
        }
    }
}

impl Stub for TestWindow {
    fn stub(metadata: ObjectMeta, _: &()) -> Self {
        let spec = TestWindowSpec {
            selector: LabelSelector::default(),
            ttl: kube::core::Duration::from(std::time::Duration::ZERO),
            expires_at: None,
            closed: false,
            reason: String::new(),
            protect: Protect::default(),
            ci: None,
            opened_by: None,
        };
        Self {
            metadata,
            spec,
            status: None,
        }
    }
}

impl Stub for CITrust {
    fn stub(metadata: ObjectMeta, _: &()) -> Self {
        let spec = CITrustSpec {
            issuer: String::new(),
            subject: String::new(),
            claims: Default::default(),
            grants: Vec::new(),
            bounds: None,
        };
        Self { metadata, spec }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::ObjectRef;

    #[test]
    fn a_stub_names_the_same_object_a_store_holds() {
        let meta = ObjectMeta {
            name: Some("w".into()),
            namespace: Some("a".into()),
            ..ObjectMeta::default()
        };
        let window = TestWindow::stub(meta.clone(), &());
        assert_eq!(
            ObjectRef::from_obj(&window),
            ObjectRef::new("w").within("a")
        );
        let ar = ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "karpenter.sh",
            "v1",
            "NodeClaim",
        ));
        let claim = DynamicObject::stub(meta, &ar);
        assert_eq!(claim.metadata.name.as_deref(), Some("w"));
        assert_eq!(claim.types.unwrap().kind, "NodeClaim");
    }
}
