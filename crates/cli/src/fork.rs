//! `zftl fork create|delete|list`: writable forks of snapshots on an image
//! or device (mount, do, clean shutdown), or through the control socket of
//! a running `zftl serve` (`--server`), which exports each live fork
//! writable over NBD under its own name. Both ways send the same control
//! requests (`zftl::control`) over the channel `zftl range` uses
//! ([`crate::range::run_on`]), so they check and answer alike.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::{Map, Value};
use zftl::control::{convert, OpName, WireRequest};

use crate::args::ForkCommand;
use crate::error::CliError;
use crate::range::{run_on, Place};

/// What the command prints: where it ran, then the reply's fields.
#[derive(Serialize)]
struct ForkReport {
    #[serde(flatten)]
    place: Place,
    #[serde(flatten)]
    body: Map<String, Value>,
}

impl ForkReport {
    fn text(&self) -> String {
        let b = &self.body;
        let str_of = |v: &Value| v.as_str().unwrap_or("?").to_string();
        let created = |f: &Value| match f["created"].as_str() {
            Some(t) => t.to_string(),
            None => "-".to_string(),
        };
        let base = |f: &Value| match f["base"]["name"].as_str() {
            Some(n) => n.to_string(),
            None => format!("#{}", f["base"]["id"]),
        };
        match b.get("op").and_then(Value::as_str) {
            Some("fork_create") => {
                let f = &b["fork"];
                let mut t = crate::report::Text::default();
                t.line(format!(
                    "fork {:?} of snapshot {:?} created on {} (durable)",
                    str_of(&f["name"]),
                    base(f),
                    self.place
                ));
                t.row("id", &f["id"]);
                t.row("created (UTC)", created(f));
                t.row("blocks", &f["block_count"]);
                t.row("lba_offset", &f["lba_offset"]);
                t.row("create_seq", &f["create_seq"]);
                t.render()
            }
            Some("fork_delete") => format!(
                "fork {:?} deleted on {} (durable; its blocks come back through GC)\n",
                str_of(&b["name"]),
                self.place
            ),
            Some("forks") => {
                let list = b["forks"].as_array().map_or(&[][..], Vec::as_slice);
                let mut out = format!("forks on {}: {}\n", self.place, list.len());
                if list.is_empty() {
                    return out;
                }
                let name_width = list
                    .iter()
                    .map(|f| str_of(&f["name"]).chars().count())
                    .max()
                    .unwrap_or(0)
                    .max("NAME".len());
                let base_width = list
                    .iter()
                    .map(|f| base(f).chars().count())
                    .max()
                    .unwrap_or(0)
                    .max("SNAPSHOT".len());
                out.push_str(&format!(
                    "  {:>6}  {:<name_width$}  {:<base_width$}  {:<20}  {:>12}  {:>14}\n",
                    "ID", "NAME", "SNAPSHOT", "CREATED (UTC)", "BLOCKS", "LBA_OFFSET"
                ));
                for f in list {
                    out.push_str(&format!(
                        "  {:>6}  {:<name_width$}  {:<base_width$}  {:<20}  {:>12}  {:>14}\n",
                        f["id"].to_string(),
                        str_of(&f["name"]),
                        base(f),
                        created(f),
                        f["block_count"].to_string(),
                        f["lba_offset"].to_string()
                    ));
                }
                out
            }
            _ => format!("{}\n", Value::Object(b.clone())),
        }
    }
}

pub fn run(cmd: &ForkCommand, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    let (request, target) = match cmd {
        ForkCommand::Create(a) => (
            WireRequest::fork_create(None, &a.snapshot, &a.name),
            &a.target,
        ),
        ForkCommand::Delete(a) => (WireRequest::fork_delete(None, &a.name), &a.target),
        ForkCommand::List(a) => (WireRequest::bare(None, OpName::Forks), &a.target),
    };
    // The same checks a server makes, before anything is opened.
    convert(&request).map_err(|e| CliError::Usage(e.message))?;
    let (place, body) = run_on(target, top_image, |channel| channel.call(&request))?;
    let report = ForkReport { place, body };
    crate::emit(json, &report, || report.text())
}
