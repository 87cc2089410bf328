//! `zftl range clone|move|delete|merge|attr|attrs`: range operations on an
//! image or device (mount, apply, clean shutdown), or through the control
//! socket of a running `zftl serve` (`--server`). Both ways build the same
//! control request (`zftl::control`), so they check and answer alike.
//! [`run_on`] and [`Channel`] are that shared path; `zftl snapshot` uses
//! them too.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};
use zftl::control::{
    convert, execute, parse_reply, Id, OpName, Target, WireAttribute, WireOp, WirePolicy,
    WireRequest, MAX_REPLY_BYTES,
};
use zftl_core::{Backend, Driver, FtlConfig};

use crate::args::{AttrArg, ImageOpt, PolicyArg, RangeCommand, RangeTarget};
use crate::error::CliError;
use crate::{image, volume};

/// Where a command ran: one of an image, a device or a server's socket.
#[derive(Serialize)]
pub(crate) struct Place {
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<String>,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match (&self.image, &self.device, &self.server) {
            (Some(p), _, _) => write!(f, "image {p}"),
            (_, Some(p), _) => write!(f, "device {p}"),
            (_, _, Some(p)) => write!(f, "server {p}"),
            _ => f.write_str("?"),
        }
    }
}

/// What the command prints: where it ran, then the reply's fields.
#[derive(Serialize)]
struct RangeReport {
    #[serde(flatten)]
    place: Place,
    #[serde(flatten)]
    body: Map<String, Value>,
}

impl RangeReport {
    fn place(&self) -> String {
        self.place.to_string()
    }

    fn text(&self) -> String {
        let b = &self.body;
        let op = b.get("op").and_then(Value::as_str).unwrap_or("?");
        if op == "attrs" {
            let ranges = b.get("ranges").and_then(Value::as_array);
            let ranges = ranges.map_or(&[][..], Vec::as_slice);
            let mut out = format!("attribute ranges on {}: {}\n", self.place(), ranges.len());
            for r in ranges {
                let names: Vec<&str> = r["attributes"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                out.push_str(&format!(
                    "  lba {:>12}  blocks {:>12}  {}\n",
                    r["lba"],
                    r["blocks"],
                    names.join(", ")
                ));
            }
            if let Some(next) = b.get("next").and_then(Value::as_u64) {
                out.push_str(&format!("more from lba {next} (--from {next})\n"));
            }
            return out;
        }
        let mut t = crate::report::Text::default();
        t.line(format!(
            "{op} applied on {} (atomic, durable)",
            self.place()
        ));
        t.row("operations", &b["operations"]);
        t.row("blocks", &b["blocks"]);
        t.render()
    }
}

/// The request a command line stands for, and where to run it.
fn request_of(cmd: &RangeCommand) -> (WireRequest, &RangeTarget, bool) {
    let single = |op| WireRequest::single(None, op);
    match cmd {
        RangeCommand::Clone(a) | RangeCommand::Move(a) => {
            let name = match cmd {
                RangeCommand::Clone(_) => OpName::Clone,
                _ => OpName::Move,
            };
            let ranges: Vec<_> = a.ranges.iter().map(|p| (p.src, p.dst, p.blocks)).collect();
            (single(WireOp::pairs(name, &ranges)), &a.target, false)
        }
        RangeCommand::Delete(a) => {
            let ranges: Vec<_> = a.ranges.iter().map(|s| (s.lba, s.blocks)).collect();
            (single(WireOp::delete(&ranges)), &a.target, false)
        }
        RangeCommand::Merge(a) => {
            let policy = match a.policy {
                PolicyArg::Fail => WirePolicy::Fail,
                PolicyArg::FirstWins => WirePolicy::FirstWins,
                PolicyArg::LastWins => WirePolicy::LastWins,
            };
            let op = WireOp::merge(&a.sources, a.dst, a.blocks, policy);
            (single(op), &a.target, false)
        }
        RangeCommand::Attr(a) => {
            let attribute = match a.attribute {
                AttrArg::Immutable => WireAttribute::Immutable,
                AttrArg::Mutable => WireAttribute::Mutable,
                AttrArg::NonPersistent => WireAttribute::NonPersistent,
                AttrArg::Persistent => WireAttribute::Persistent,
            };
            let ranges: Vec<_> = a.ranges.iter().map(|s| (s.lba, s.blocks)).collect();
            (single(WireOp::attr(attribute, &ranges)), &a.target, false)
        }
        RangeCommand::Attrs(a) => (
            WireRequest::attrs(None, a.from, a.max),
            &a.target,
            // Without --max, every page.
            a.max.is_none(),
        ),
    }
}

/// Runs requests somewhere and returns their reply bodies.
pub(crate) trait Channel {
    fn call(&mut self, request: &WireRequest) -> Result<Map<String, Value>, CliError>;
}

pub fn run(cmd: &RangeCommand, top_image: Option<&PathBuf>, json: bool) -> Result<(), CliError> {
    let (request, target, all_pages) = request_of(cmd);
    // The same checks a server makes, before anything is opened.
    convert(&request).map_err(|e| CliError::Usage(e.message))?;
    let (place, body) = run_on(target, top_image, |channel| {
        perform(channel, request, all_pages)
    })?;
    let report = RangeReport { place, body };
    crate::emit(json, &report, || report.text())
}

/// Runs `work` on a channel to `target`: the control socket of a running
/// server, or the FTL mounted by this process on the device or image
/// (then shut down cleanly, also when `work` failed: nothing it did not
/// finish changed).
pub(crate) fn run_on<R>(
    target: &RangeTarget,
    top_image: Option<&PathBuf>,
    work: impl FnOnce(&mut dyn Channel) -> Result<R, CliError>,
) -> Result<(Place, R), CliError> {
    let mut place = Place {
        image: None,
        device: None,
        server: None,
    };
    let out = if let Some(socket) = &target.server {
        let mut server = Server::connect(socket)?;
        place.server = Some(socket.display().to_string());
        work(&mut server)?
    } else if let Some(device) = &target.device {
        place.device = Some(device.display().to_string());
        on_device(device, work)?
    } else {
        let path = volume::image_path(
            &ImageOpt {
                image: target.image.clone(),
                device: None,
            },
            top_image,
        )?;
        refuse_served_image(&path)?;
        let dev = image::open(&path)?;
        let (out, mut dev) = on_backend(&path, dev, work)?;
        dev.sync()
            .map_err(|e| ftl_error(&path, "sync", crate::error::sim_reason(&e)))?;
        place.image = Some(path.display().to_string());
        out
    };
    Ok((place, out))
}

/// An image a running `zftl serve` has open must not be mounted a second
/// time (both would write it): refuse when its default control socket
/// answers, and point at `--server`.
fn refuse_served_image(path: &Path) -> Result<(), CliError> {
    let mut socket = path.as_os_str().to_owned();
    socket.push(".control");
    let socket = PathBuf::from(socket);
    if UnixStream::connect(&socket).is_ok() {
        return Err(CliError::Ftl {
            path: path.to_path_buf(),
            reason: format!(
                "in use by a running `zftl serve` (its control socket answers); use --server {}",
                socket.display()
            ),
        });
    }
    Ok(())
}

/// One request, or for `attrs` without `max` every page of it.
fn perform(
    channel: &mut dyn Channel,
    mut request: WireRequest,
    all_pages: bool,
) -> Result<Map<String, Value>, CliError> {
    let mut body = channel.call(&request)?;
    if !all_pages {
        return Ok(body);
    }
    // The table is bounded (the core keeps at most 65536 ranges), so this
    // ends; `next` only grows.
    while let Some(next) = body.get("next").and_then(Value::as_u64) {
        if request.from.is_some_and(|f| next <= f) {
            return Err(CliError::InvalidArgument(format!(
                "attrs: the listing does not advance past lba {next}"
            )));
        }
        request.from = Some(next);
        let page = channel.call(&request)?;
        let more = page.get("ranges").and_then(Value::as_array).cloned();
        if let Some(Value::Array(ranges)) = body.get_mut("ranges") {
            ranges.extend(more.unwrap_or_default());
        }
        body.insert(
            "next".into(),
            page.get("next").cloned().unwrap_or(Value::Null),
        );
    }
    Ok(body)
}

fn ftl_error(path: &Path, what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Ftl {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

/// The FTL mounted by this process.
struct Local<'a, T> {
    path: &'a Path,
    target: &'a mut T,
}

impl<T: Target> Channel for Local<'_, T> {
    fn call(&mut self, request: &WireRequest) -> Result<Map<String, Value>, CliError> {
        let command = convert(request).map_err(|e| CliError::Usage(e.message))?;
        execute(self.target, command)
            .map_err(|e| ftl_error(self.path, &op_name(request), e.message))
    }
}

fn op_name(request: &WireRequest) -> String {
    serde_json::to_value(&request.op)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Mounts the FTL on `dev`, runs `work`, shuts down cleanly (also when
/// the FTL refused a request: then nothing changed) and hands the device
/// back.
fn on_backend<B: Backend, R>(
    path: &Path,
    dev: B,
    work: impl FnOnce(&mut dyn Channel) -> Result<R, CliError>,
) -> Result<(R, B), CliError> {
    let mut driver =
        Driver::mount(dev, FtlConfig::default()).map_err(|e| volume::mount_error(path, &e))?;
    let outcome = work(&mut Local {
        path,
        target: &mut driver,
    });
    let dev = driver
        .shutdown()
        .map_err(|e| ftl_error(path, "shutdown", e));
    match (outcome, dev) {
        (Ok(body), Ok(dev)) => Ok((body, dev)),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
    }
}

#[cfg(target_os = "linux")]
fn on_device<R>(
    device: &Path,
    work: impl FnOnce(&mut dyn Channel) -> Result<R, CliError>,
) -> Result<R, CliError> {
    let dev = crate::device::open(device)?;
    on_backend(device, dev, work)
        .map(|(out, _)| out)
        .map_err(CliError::on_device)
}

#[cfg(not(target_os = "linux"))]
fn on_device<R>(
    device: &Path,
    _work: impl FnOnce(&mut dyn Channel) -> Result<R, CliError>,
) -> Result<R, CliError> {
    Err(CliError::DeviceOpen(format!(
        "{}: NVMe ZNS devices are supported on Linux only",
        device.display()
    )))
}

/// A connection to a server's control socket.
struct Server {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
}

impl Server {
    fn connect(path: &Path) -> Result<Server, CliError> {
        let stream = UnixStream::connect(path).map_err(|e| CliError::Server {
            path: path.to_path_buf(),
            reason: format!(
                "cannot connect: {e} (is `zftl serve` running with this control socket?)"
            ),
        })?;
        let writer = stream.try_clone().map_err(|e| CliError::Server {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        Ok(Server {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            next_id: 1,
        })
    }

    fn error(&self, reason: impl Into<String>) -> CliError {
        CliError::Server {
            path: self.path.clone(),
            reason: reason.into(),
        }
    }
}

impl Channel for Server {
    fn call(&mut self, request: &WireRequest) -> Result<Map<String, Value>, CliError> {
        let id = Id::Number(self.next_id);
        self.next_id += 1;
        let mut request = request.clone();
        request.id = Some(id.clone());
        let line = request.to_line() + "\n";
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| self.error(format!("sending the request: {e}")))?;
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_REPLY_BYTES as u64 + 1)
            .read_until(b'\n', &mut buf)
            .map_err(|e| self.error(format!("reading the reply: {e}")))?;
        if n == 0 {
            return Err(self.error("the server closed the connection without replying"));
        }
        if buf.pop() != Some(b'\n') {
            return Err(self.error(format!(
                "a reply line longer than {MAX_REPLY_BYTES} bytes, or cut short"
            )));
        }
        let reply = parse_reply(&buf).map_err(|e| self.error(format!("bad reply: {e}")))?;
        let op = op_name(&request);
        match reply.result {
            Err(e) => Err(self.error(format!("{op}: {e}"))),
            Ok(_) if reply.id.as_ref() != Some(&id) => Err(self.error(format!(
                "a reply to request {:?} where {id:?} was sent",
                reply.id
            ))),
            Ok(body) => Ok(body),
        }
    }
}
