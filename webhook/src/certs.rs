//! Placeholder: `koord-webhook certs` is being built in this module.

#[derive(Debug, clap::Args)]
pub struct CertsArgs {}

pub fn run(_args: CertsArgs) -> anyhow::Result<()> {
    anyhow::bail!("certs is not built yet")
}
