//! `disruption-guard crd`: the CustomResourceDefinitions (`TestWindow`, `CITrust`), generated
//! from the Rust types. The chart's copies in `files/` are made from them (`make crd`).

use clap::ValueEnum;
use kube::CustomResourceExt;

use crate::resources::{CITrust, TestWindow};

/// One of the CRDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// `testwindows.disruption-guard.io`.
    Testwindows,
    /// `citrusts.disruption-guard.io`.
    Citrusts,
}

/// One CRD as YAML, exactly as the chart ships it.
pub fn one(which: Which) -> anyhow::Result<String> {
    Ok(match which {
        Which::Testwindows => serde_saphyr::to_string(&TestWindow::crd())?,
        Which::Citrusts => serde_saphyr::to_string(&CITrust::crd())?,
    })
}

/// Every CRD as one YAML stream (`---` between them), or only `which`.
pub fn yaml(which: Option<Which>) -> anyhow::Result<String> {
    match which {
        Some(which) => one(which),
        None => Ok(format!(
            "{}---\n{}",
            one(Which::Testwindows)?,
            one(Which::Citrusts)?
        )),
    }
}

/// Prints the CRDs (or one) to stdout.
pub fn print(which: Option<Which>) -> anyhow::Result<()> {
    print!("{}", yaml(which)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crd_stream_holds_both_kinds_separated() {
        let text = yaml(None).unwrap();
        assert!(text.contains("name: testwindows.disruption-guard.io"));
        assert!(text.contains("name: citrusts.disruption-guard.io"));
        assert_eq!(text.matches("\n---\n").count(), 1);
        assert!(!one(Which::Citrusts).unwrap().contains("testwindows"));
    }
}
