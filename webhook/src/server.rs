//! Placeholder: the admission server is being built in this module.

#[derive(Debug, clap::Args)]
pub struct ServeArgs {}

pub fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("serve is not built yet")
}
