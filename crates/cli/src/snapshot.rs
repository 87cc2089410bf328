//! `zftl snapshot create|delete|list|read|diff`: snapshots on an image or
//! device (mount, do, clean shutdown), or through the control socket of a
//! running `zftl serve` (`--server`). Both ways send the same control
//! requests (`zftl::control`) over the channel `zftl range` uses
//! ([`crate::range::run_on`]), so they check and answer alike.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};
use serde_json::{Map, Value};
use zftl::control::{convert, decode_data, OpName, WireRequest, MAX_SNAPSHOT_READ_BYTES};
use zftl_core::join_runs;

use crate::args::{SnapshotCommand, SnapshotDiffArgs};
use crate::error::CliError;
use crate::range::{run_on, Channel, Place};

/// What the command prints: where it ran, then the reply's fields.
#[derive(Serialize)]
struct SnapshotReport {
    #[serde(flatten)]
    place: Place,
    #[serde(flatten)]
    body: Map<String, Value>,
}

impl SnapshotReport {
    fn text(&self) -> String {
        let b = &self.body;
        let str_of = |v: &Value| v.as_str().unwrap_or("?").to_string();
        let created = |s: &Value| match s["created"].as_str() {
            Some(t) => t.to_string(),
            None => "-".to_string(),
        };
        match b.get("op").and_then(Value::as_str) {
            Some("snapshot_create") => {
                let s = &b["snapshot"];
                let mut t = crate::report::Text::default();
                t.line(format!(
                    "snapshot {:?} created on {} (durable)",
                    str_of(&s["name"]),
                    self.place
                ));
                t.row("id", &s["id"]);
                t.row("created (UTC)", created(s));
                t.row("epoch", &s["epoch"]);
                t.row("create_seq", &s["create_seq"]);
                t.render()
            }
            Some("snapshot_delete") => format!(
                "snapshot {:?} deleted on {} (durable; the blocks only it kept come back through GC)\n",
                str_of(&b["name"]),
                self.place
            ),
            Some("snapshots") => {
                let list = b["snapshots"].as_array().map_or(&[][..], Vec::as_slice);
                let mut out = format!(
                    "snapshots on {}: {}, keeping {} replaced block(s)\n",
                    self.place,
                    list.len(),
                    b["snapshot_versions"]
                );
                if list.is_empty() {
                    return out;
                }
                let width = list
                    .iter()
                    .map(|s| str_of(&s["name"]).chars().count())
                    .max()
                    .unwrap_or(0)
                    .max("NAME".len());
                out.push_str(&format!(
                    "  {:>6}  {:<8}  {:<width$}  {:<20}  {:>8}  {:>12}\n",
                    "ID", "KIND", "NAME", "CREATED (UTC)", "EPOCH", "CREATE_SEQ"
                ));
                for s in list {
                    out.push_str(&format!(
                        "  {:>6}  {:<8}  {:<width$}  {:<20}  {:>8}  {:>12}\n",
                        s["id"].to_string(),
                        str_of(&s["kind"]),
                        str_of(&s["name"]),
                        created(s),
                        s["epoch"].to_string(),
                        s["create_seq"].to_string()
                    ));
                }
                let points = list.iter().filter(|s| s["kind"] == "point").count();
                if points > 0 {
                    out.push_str(&format!(
                        "{points} of them point(s) of the protection window (kind point)\n"
                    ));
                }
                out
            }
            Some("snapshot_read") => format!(
                "read {} block(s) ({} bytes) from lba {} of snapshot {:?} on {} into {}\n",
                b["blocks"],
                b["bytes"],
                b["lba"],
                str_of(&b["name"]),
                self.place,
                str_of(&b["out"])
            ),
            _ => format!("{}\n", Value::Object(b.clone())),
        }
    }
}

pub fn run(cmd: &SnapshotCommand, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    let (place, body) = match cmd {
        SnapshotCommand::Create(a) | SnapshotCommand::Delete(a) => {
            let op = match cmd {
                SnapshotCommand::Create(_) => OpName::SnapshotCreate,
                _ => OpName::SnapshotDelete,
            };
            one(
                WireRequest::snapshot(None, op, &a.name),
                &a.target,
                top_image,
            )?
        }
        SnapshotCommand::List(a) => one(
            WireRequest::bare(None, OpName::Snapshots),
            &a.target,
            top_image,
        )?,
        SnapshotCommand::Diff(a) => return diff(a, top_image, json),
        SnapshotCommand::Read(a) => {
            // The same checks a server makes, before anything is opened.
            let first = WireRequest::snapshot_read(None, &a.name, a.lba, a.blocks);
            convert(&first).map_err(|e| CliError::Usage(e.message))?;
            let mut file = File::create(&a.out).map_err(|e| {
                CliError::InvalidArgument(format!("cannot create {}: {e}", a.out.display()))
            })?;
            let read = run_on(&a.target, top_image, |channel| {
                read_into(channel, &a.name, a.lba, a.blocks, &mut file, &a.out)
            });
            let read = read.and_then(|r| {
                file.sync_all().map_err(|e| write_error(&a.out, e))?;
                Ok(r)
            });
            match read {
                Ok(r) => r,
                Err(e) => {
                    // No partial copy left behind.
                    drop(file);
                    let _ = std::fs::remove_file(&a.out);
                    return Err(e);
                }
            }
        }
    };
    let report = SnapshotReport { place, body };
    crate::emit(json, &report, || report.text())
}

/// Sends `request` (checked first, as a server would) and returns its reply.
fn one(
    request: WireRequest,
    target: &crate::args::RangeTarget,
    top_image: Option<&PathBuf>,
) -> Result<(Place, Map<String, Value>), CliError> {
    convert(&request).map_err(|e| CliError::Usage(e.message))?;
    run_on(target, top_image, |channel| channel.call(&request))
}

fn write_error(path: &Path, e: std::io::Error) -> CliError {
    CliError::InvalidArgument(format!("cannot write {}: {e}", path.display()))
}

/// Reads `blocks` blocks from `lba` of snapshot `name` into `file`, in
/// requests of at most [`MAX_SNAPSHOT_READ_BYTES`]. A snapshot does not
/// change, so the pieces make one consistent copy (a delete of the
/// snapshot meanwhile fails the next piece).
fn read_into(
    channel: &mut dyn Channel,
    name: &str,
    lba: u64,
    blocks: u64,
    file: &mut File,
    out: &Path,
) -> Result<Map<String, Value>, CliError> {
    let ping = channel.call(&WireRequest::bare(None, OpName::Ping))?;
    let block_size = ping
        .get("block_size")
        .and_then(Value::as_u64)
        .filter(|&b| b > 0)
        .ok_or_else(|| CliError::InvalidArgument("the ping reply names no block_size".into()))?;
    let per_request = (MAX_SNAPSHOT_READ_BYTES as u64 / block_size).max(1);
    let mut done = 0u64;
    while done < blocks {
        let n = per_request.min(blocks - done);
        let at = lba.checked_add(done).ok_or_else(|| {
            CliError::InvalidArgument(format!("--lba {lba} plus {blocks} blocks overflows"))
        })?;
        let reply = channel.call(&WireRequest::snapshot_read(None, name, at, n))?;
        let text = reply.get("data").and_then(Value::as_str).unwrap_or("");
        let data = decode_data(text)
            .map_err(|e| CliError::InvalidArgument(format!("snapshot_read reply: {e}")))?;
        if data.len() as u64 != n * block_size {
            return Err(CliError::InvalidArgument(format!(
                "snapshot_read reply: {} bytes for {n} blocks of {block_size}",
                data.len()
            )));
        }
        file.write_all(&data).map_err(|e| write_error(out, e))?;
        done += n;
    }
    let mut body = Map::new();
    body.insert("op".into(), "snapshot_read".into());
    body.insert("name".into(), name.into());
    body.insert("lba".into(), lba.into());
    body.insert("blocks".into(), blocks.into());
    body.insert("bytes".into(), (blocks * block_size).into());
    body.insert("out".into(), out.display().to_string().into());
    Ok(body)
}

/// What `zftl snapshot diff` prints: where it ran, the snapshots compared
/// (`until` null: the live volume), and the runs of changed blocks with
/// their totals.
#[derive(Serialize)]
struct DiffReport {
    #[serde(flatten)]
    place: Place,
    #[serde(flatten)]
    diff: Diff,
}

/// The snapshots compared and what changed between them.
#[derive(Serialize)]
struct Diff {
    op: &'static str,
    since: Value,
    until: Value,
    block_size: u64,
    /// `{"lba", "blocks"}` each, in order, apart from one another.
    #[serde(serialize_with = "runs_as_objects")]
    runs: Vec<(u64, u64)>,
    extents: u64,
    changed_blocks: u64,
    changed_bytes: u64,
}

fn runs_as_objects<S: Serializer>(runs: &[(u64, u64)], s: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Run {
        lba: u64,
        blocks: u64,
    }
    s.collect_seq(runs.iter().map(|&(lba, blocks)| Run { lba, blocks }))
}

impl DiffReport {
    fn text(&self) -> String {
        let d = &self.diff;
        let name = |s: &Value| format!("{:?}", s["name"].as_str().unwrap_or("?"));
        let other = match &d.until {
            Value::Null => "the live volume".to_string(),
            s => format!("snapshot {}", name(s)),
        };
        let mut out = format!(
            "blocks changed on {} between snapshot {} and {other} (blocks of {} bytes):\n",
            self.place,
            name(&d.since),
            d.block_size
        );
        if !d.runs.is_empty() {
            let bs = d.block_size;
            let rows: Vec<[String; 4]> = d
                .runs
                .iter()
                .map(|&(lba, n)| {
                    [lba, n, lba.saturating_mul(bs), n.saturating_mul(bs)].map(|v| v.to_string())
                })
                .collect();
            let heads = ["LBA", "BLOCKS", "OFFSET (BYTES)", "LENGTH (BYTES)"];
            let mut width = heads.map(str::len);
            for row in &rows {
                for (w, cell) in width.iter_mut().zip(row) {
                    *w = (*w).max(cell.len());
                }
            }
            let line = |cells: [&str; 4]| {
                let [a, b, c, d] = cells;
                let [wa, wb, wc, wd] = width;
                format!("  {a:>wa$}  {b:>wb$}  {c:>wc$}  {d:>wd$}\n")
            };
            out.push_str(&line(heads));
            for row in &rows {
                out.push_str(&line([&row[0], &row[1], &row[2], &row[3]]));
            }
        }
        out.push_str(&format!(
            "{} extent(s), {} block(s), {} bytes ({}) changed\n",
            d.extents,
            d.changed_blocks,
            d.changed_bytes,
            crate::report::human_bytes(d.changed_bytes)
        ));
        out
    }
}

/// `zftl snapshot diff`: every page of `snapshot_diff`, joined.
fn diff(a: &SnapshotDiffArgs, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    let first = WireRequest::snapshot_diff(None, &a.since, a.until.as_deref(), None, None, None);
    // The same checks a server makes, before anything is opened.
    convert(&first).map_err(|e| CliError::Usage(e.message))?;
    let (place, diff) = run_on(&a.target, top_image, |channel| diff_pages(channel, first))?;
    let report = DiffReport { place, diff };
    crate::emit(json, &report, || report.text())
}

/// The pages of `request` from block 0 on, until `next_lba` is null.
/// Each page names the snapshots it compared; all must be the same ones
/// (a snapshot deleted and taken again under its name meanwhile is
/// refused).
fn diff_pages(channel: &mut dyn Channel, mut request: WireRequest) -> Result<Diff, CliError> {
    let bad = |what: String| CliError::InvalidArgument(format!("snapshot_diff reply: {what}"));
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut first: Option<Value> = None;
    loop {
        let at = request.lba.unwrap_or(0);
        // A `Value` indexes a missing key as null, where a `Map` panics.
        let page = Value::Object(channel.call(&request)?);
        if let Some(f) = &first {
            for side in ["since", "until"] {
                if f[side]["id"] != page[side]["id"] {
                    return Err(CliError::InvalidArgument(format!(
                        "snapshot {:?} was deleted and taken again during the diff; run it again",
                        page[side]["name"].as_str().unwrap_or("?")
                    )));
                }
            }
        }
        let list = page["runs"].as_array();
        let list = list.ok_or_else(|| bad("no `runs`".into()))?;
        // In order and apart, from where this page starts (and past the
        // last page's runs, which `join_runs` relies on).
        let mut from = runs.last().map_or(at, |r| r.0.saturating_add(r.1)).max(at);
        let mut got = Vec::with_capacity(list.len());
        for r in list {
            let lba = r.get("lba").and_then(Value::as_u64);
            let blocks = r.get("blocks").and_then(Value::as_u64);
            match (lba, blocks) {
                (Some(l), Some(n)) if n > 0 && l >= from => {
                    got.push((l, n));
                    from = l.saturating_add(n);
                }
                _ => {
                    return Err(bad(format!(
                        "a run {r} out of order (listing from lba {at})"
                    )))
                }
            }
        }
        join_runs(&mut runs, got);
        let next = page["next_lba"].as_u64();
        if first.is_none() {
            first = Some(page);
        }
        match next {
            Some(next) if next > at => request.lba = Some(next),
            Some(next) => return Err(bad(format!("the listing does not advance past lba {next}"))),
            None => break,
        }
    }
    let first = first.expect("one page at least");
    let block_size = first["block_size"]
        .as_u64()
        .filter(|&b| b > 0)
        .ok_or_else(|| bad("no block_size".into()))?;
    let changed_blocks = runs.iter().fold(0u64, |sum, r| sum.saturating_add(r.1));
    Ok(Diff {
        op: "snapshot_diff",
        since: first["since"].clone(),
        until: first["until"].clone(),
        block_size,
        extents: runs.len() as u64,
        changed_blocks,
        changed_bytes: changed_blocks.saturating_mul(block_size),
        runs,
    })
}
