//! A Deployment's rollout strategy resolved the way the deployment controller resolves it
//! (`ResolveFenceposts` in `pkg/controller/deployment/util`): `maxSurge` percentages round up,
//! `maxUnavailable` percentages round down, both default to 25 %, and when both come out 0 the
//! controller takes `maxUnavailable = 1`.

use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// How a rollout of this Deployment proceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollout {
    /// `Recreate`: every old pod goes before a new one starts.
    Recreate,
    /// `RollingUpdate` with these effective bounds for the desired replica count.
    Rolling {
        /// Pods the controller may create above the desired count.
        max_surge: i32,
        /// Pods that may be unavailable during the rollout.
        max_unavailable: i32,
    },
}

/// Why a strategy could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} {value:?}: expected an integer or a percentage like \"25%\"")]
pub struct InvalidStrategy {
    field: &'static str,
    value: String,
}

/// Resolves `strategy` for `replicas` desired pods.
pub fn resolve(
    strategy: Option<&DeploymentStrategy>,
    replicas: i32,
) -> Result<Rollout, InvalidStrategy> {
    if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        return Ok(Rollout::Recreate);
    }
    let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
    let default = IntOrString::String("25%".into());
    let surge = rolling
        .and_then(|r| r.max_surge.as_ref())
        .unwrap_or(&default);
    let unavailable = rolling
        .and_then(|r| r.max_unavailable.as_ref())
        .unwrap_or(&default);
    let max_surge = scaled(surge, replicas, true, "maxSurge")?;
    let mut max_unavailable = scaled(unavailable, replicas, false, "maxUnavailable")?;
    if max_surge == 0 && max_unavailable == 0 {
        max_unavailable = 1;
    }
    Ok(Rollout::Rolling {
        max_surge,
        max_unavailable,
    })
}

/// `GetScaledValueFromIntOrPercent`: an integer as is, a percentage of `total` rounded up or
/// down.
fn scaled(
    value: &IntOrString,
    total: i32,
    round_up: bool,
    field: &'static str,
) -> Result<i32, InvalidStrategy> {
    let invalid = || InvalidStrategy {
        field,
        value: match value {
            IntOrString::Int(i) => i.to_string(),
            IntOrString::String(s) => s.clone(),
        },
    };
    match value {
        IntOrString::Int(i) if *i >= 0 => Ok(*i),
        IntOrString::Int(_) => Err(invalid()),
        IntOrString::String(s) => {
            let percent: i64 = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .filter(|p| *p >= 0)
                .ok_or_else(invalid)?;
            let product = percent * i64::from(total);
            let result = if round_up {
                (product + 99) / 100
            } else {
                product / 100
            };
            i32::try_from(result).map_err(|_| invalid())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strategy(value: serde_json::Value) -> DeploymentStrategy {
        serde_json::from_value(value).unwrap()
    }

    fn rolling(surge: serde_json::Value, unavailable: serde_json::Value) -> DeploymentStrategy {
        strategy(json!({"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}}))
    }

    #[test]
    fn the_defaults_surge_one_pod_and_keep_the_lone_replica_available() {
        assert_eq!(
            resolve(None, 1),
            Ok(Rollout::Rolling {
                max_surge: 1,
                max_unavailable: 0
            })
        );
        let only_type = strategy(json!({"type": "RollingUpdate"}));
        assert_eq!(resolve(Some(&only_type), 1), resolve(None, 1));
    }

    #[test]
    fn max_surge_percentages_round_up_and_max_unavailable_round_down() {
        let s = rolling(json!("10%"), json!("90%"));
        assert_eq!(
            resolve(Some(&s), 1),
            Ok(Rollout::Rolling {
                max_surge: 1,
                max_unavailable: 0
            })
        );
        assert_eq!(
            resolve(Some(&s), 3),
            Ok(Rollout::Rolling {
                max_surge: 1,
                max_unavailable: 2
            })
        );
    }

    #[test]
    fn zero_surge_and_zero_unavailable_resolve_to_one_unavailable_like_the_controller() {
        let s = rolling(json!("0%"), json!("0%"));
        assert_eq!(
            resolve(Some(&s), 1),
            Ok(Rollout::Rolling {
                max_surge: 0,
                max_unavailable: 1
            })
        );
    }

    #[test]
    fn absolute_values_are_taken_as_they_are() {
        let s = rolling(json!(2), json!(0));
        assert_eq!(
            resolve(Some(&s), 1),
            Ok(Rollout::Rolling {
                max_surge: 2,
                max_unavailable: 0
            })
        );
    }

    #[test]
    fn recreate_is_recognised() {
        let s = strategy(json!({"type": "Recreate"}));
        assert_eq!(resolve(Some(&s), 1), Ok(Rollout::Recreate));
    }

    #[test]
    fn a_string_that_is_not_a_percentage_is_invalid() {
        let s = rolling(json!("1"), json!(0));
        assert!(resolve(Some(&s), 1).is_err());
        let s = rolling(json!("x%"), json!(0));
        assert!(resolve(Some(&s), 1).is_err());
    }
}
