//! `zftl view --at WHEN`: the NBD export of a running `zftl serve` that
//! reads what a snapshot or protection-window point holds. `zftl serve`
//! exports every live snapshot, points included, read-only as
//! `EXPORT@NAME` (`crates/nbd-frontend/src/export.rs`), so a view is only
//! a name: nothing is copied or activated, and it lives as long as its
//! snapshot or point. The export's name and the server's NBD address come
//! from the `ping` reply of its control socket.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;
use zftl::control::{OpName, WireRequest};

use crate::args::{ImageOpt, RangeTarget, ViewArgs};
use crate::error::CliError;
use crate::range::{run_on, Channel, Place};
use crate::when::{listed, now_ns, resolve, Resolved};

/// What `zftl view` prints.
#[derive(Serialize)]
struct ViewReport {
    #[serde(flatten)]
    place: Place,
    op: &'static str,
    resolved: Resolved,
    /// The view's export name: `EXPORT@NAME`.
    export: String,
    /// `nbd://ADDR/EXPORT@NAME` (`nbds://` with TLS); null when the
    /// server does not say where it listens.
    uri: Option<String>,
}

impl ViewReport {
    fn text(&self) -> String {
        let r = &self.resolved;
        let mut t = crate::report::Text::default();
        t.line(format!(
            "read-only view of {} (taken {}) on {}",
            r.what(),
            r.taken(),
            self.place
        ));
        t.row("resolved", r.how());
        t.row("export", &self.export);
        if let Some(uri) = &self.uri {
            t.row("uri", uri);
        }
        t.render()
    }
}

fn view(
    channel: &mut dyn Channel,
    at: &str,
) -> Result<(Resolved, String, Option<String>), CliError> {
    let ping = channel.call(&WireRequest::bare(None, OpName::Ping))?;
    let Some(export) = ping.get("export").and_then(Value::as_str) else {
        return Err(CliError::InvalidArgument(
            "the server's ping reply names no export (a zftl serve older than `zftl view`?)".into(),
        ));
    };
    let list = listed(&channel.call(&WireRequest::bare(None, OpName::Snapshots))?)?;
    let resolved = resolve(&list, at, now_ns())
        .map_err(|e| CliError::InvalidArgument(format!("--at {at}: {e}")))?;
    let name = format!("{export}{}{}", zftl_nbd::VIEW_SEPARATOR, resolved.name);
    let uri = ping
        .get("uri")
        .and_then(Value::as_str)
        .map(|base| format!("{}{}{}", base, zftl_nbd::VIEW_SEPARATOR, resolved.name));
    Ok((resolved, name, uri))
}

pub fn run(args: &ViewArgs, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    let socket = match &args.server {
        Some(s) => s.clone(),
        None => {
            let image = crate::volume::image_path(
                &ImageOpt {
                    image: args.image.clone(),
                    device: None,
                },
                top_image,
            )?;
            let mut s = image.into_os_string();
            s.push(".control");
            PathBuf::from(s)
        }
    };
    let target = RangeTarget {
        image: None,
        device: None,
        server: Some(socket),
    };
    let (place, (resolved, export, uri)) =
        run_on(&target, top_image, |channel| view(channel, &args.at))?;
    let report = ViewReport {
        place,
        op: "view",
        resolved,
        export,
        uri,
    };
    crate::emit(json, &report, || report.text())
}
