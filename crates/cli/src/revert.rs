//! `zftl revert --to WHEN`: make the live volume what a snapshot or a
//! protection-window point holds, on an image or device (mount, revert,
//! clean shutdown) or through the control socket of a running `zftl
//! serve`. WHEN is resolved against the `snapshots` list
//! ([`crate::when::resolve`]); the revert is the control request
//! `snapshot_revert` of the name it resolved to, which first takes the
//! undo snapshot of the state the volume leaves.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;
use zftl::control::{convert, OpName, WireRequest};

use crate::args::RevertArgs;
use crate::error::CliError;
use crate::range::{run_on, Channel, Place};
use crate::when::{listed, now_ns, resolve, Resolved};

/// What `zftl revert` prints.
#[derive(Serialize)]
struct RevertReport {
    #[serde(flatten)]
    place: Place,
    op: &'static str,
    /// How WHEN was read and what it named.
    resolved: Resolved,
    /// The snapshot or point the volume now holds.
    to: Value,
    /// The snapshot of the state the volume left.
    undo: Value,
}

impl RevertReport {
    fn text(&self) -> String {
        let r = &self.resolved;
        let name = |v: &Value| v["name"].as_str().unwrap_or("?").to_string();
        let taken = |v: &Value| {
            v["created"]
                .as_str()
                .unwrap_or("at an unknown time")
                .to_string()
        };
        let mut t = crate::report::Text::default();
        t.line(format!(
            "reverted {} to {} (durable; no data copied)",
            self.place,
            r.what()
        ));
        t.row("resolved", r.how());
        t.row(
            "to",
            format!(
                "{:?}, taken {}, id {}, create_seq {}",
                name(&self.to),
                taken(&self.to),
                self.to["id"],
                self.to["create_seq"]
            ),
        );
        t.row(
            "undo snapshot",
            format!(
                "{:?}, id {} (`zftl revert --to {}` undoes this revert)",
                name(&self.undo),
                self.undo["id"],
                name(&self.undo)
            ),
        );
        t.render()
    }
}

/// Resolves WHEN on `channel` and reverts to what it names.
fn revert(
    channel: &mut dyn Channel,
    args: &RevertArgs,
) -> Result<(Resolved, Value, Value), CliError> {
    let list = listed(&channel.call(&WireRequest::bare(None, OpName::Snapshots))?)?;
    let resolved = resolve(&list, &args.to, now_ns())
        .map_err(|e| CliError::InvalidArgument(format!("--to {}: {e}", args.to)))?;
    let request = WireRequest::snapshot_revert(None, &resolved.name, args.undo.as_deref());
    let mut body = channel.call(&request)?;
    let to = body.remove("to").unwrap_or(Value::Null);
    let undo = body.remove("undo").unwrap_or(Value::Null);
    if !undo.is_object() {
        return Err(CliError::InvalidArgument(
            "snapshot_revert reply: no `undo` snapshot".into(),
        ));
    }
    Ok((resolved, to, undo))
}

pub fn run(args: &RevertArgs, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    // The checks a server makes on the request's form, before anything
    // is opened (the name is only known once WHEN is resolved).
    convert(&WireRequest::snapshot_revert(
        None,
        &args.to,
        args.undo.as_deref(),
    ))
    .map_err(|e| CliError::Usage(e.message))?;
    let (place, (resolved, to, undo)) =
        run_on(&args.target, top_image, |channel| revert(channel, args))?;
    let report = RevertReport {
        place,
        op: "snapshot_revert",
        resolved,
        to,
        undo,
    };
    crate::emit(json, &report, || report.text())
}
