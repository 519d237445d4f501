//! `disruption-guard crd`: the CustomResourceDefinition, generated from the Rust types.

use kube::CustomResourceExt;

use crate::resources::TestWindow;

/// The CRD as YAML, exactly as the chart ships it.
pub fn yaml() -> anyhow::Result<String> {
    Ok(serde_saphyr::to_string(&TestWindow::crd())?)
}

/// Prints the CRD to stdout.
pub fn print() -> anyhow::Result<()> {
    print!("{}", yaml()?);
    Ok(())
}
