//! `koord-webhook doctor`: from a kubeconfig, whether the install works, link by link, and the
//! first broken one ([`report`]). Each check reads what a person would look at with kubectl;
//! the last one asks the apiserver for a server-side dry-run pod create in an opted-in
//! namespace and looks for the annotation the webhook writes.

mod args;
mod checks;
pub mod report;

pub use args::{DoctorArgs, Output};
pub use report::{Check, Report, Status};

#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("Kubernetes client: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("runtime: {0}")]
    Io(#[from] std::io::Error),
}

async fn client(args: &DoctorArgs) -> Result<kube::Client, DoctorError> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Runs the checks; exit code 0 when the install works, 1 when a link is broken, 2 when the
/// API server could not be asked at all.
pub fn run(args: DoctorArgs) -> std::process::ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let report = runtime.block_on(async {
        let client = client(&args).await?;
        Ok::<_, DoctorError>(checks::run(&client, &args).await)
    });
    match report {
        Ok(report) => {
            match args.output {
                Output::Table => print!("{}", report.table()),
                Output::Json => println!("{}", report.json()),
            }
            if report.healthy() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
