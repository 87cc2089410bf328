//! Where the default image lives. Computed by hand (XDG base directory
//! rules) rather than with a directories crate.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::error::CliError;

/// The default image path: `$ZFTL_IMAGE`, else
/// `$XDG_DATA_HOME/zftl/default.img`, else
/// `$HOME/.local/share/zftl/default.img`. Empty variables count as unset, and
/// a relative `XDG_DATA_HOME` is ignored, as the XDG spec says.
pub fn default_image_path() -> Result<PathBuf, CliError> {
    default_image_path_from(|name| std::env::var_os(name))
}

fn default_image_path_from(var: impl Fn(&str) -> Option<OsString>) -> Result<PathBuf, CliError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(image) = set("ZFTL_IMAGE") {
        return Ok(image);
    }
    if let Some(data) = set("XDG_DATA_HOME").filter(|p| p.is_absolute()) {
        return Ok(data.join("zftl").join("default.img"));
    }
    if let Some(home) = set("HOME") {
        return Ok(home
            .join(".local")
            .join("share")
            .join("zftl")
            .join("default.img"));
    }
    Err(CliError::NoDefaultPath(
        "none of ZFTL_IMAGE, XDG_DATA_HOME or HOME is set; pass --image PATH",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        };
        default_image_path_from(lookup).ok()
    }

    #[test]
    fn zftl_image_wins() {
        let vars = [
            ("ZFTL_IMAGE", "/a/b.img"),
            ("XDG_DATA_HOME", "/x"),
            ("HOME", "/h"),
        ];
        assert_eq!(path_with(&vars), Some(PathBuf::from("/a/b.img")));
    }

    #[test]
    fn xdg_then_home() {
        let vars = [("XDG_DATA_HOME", "/x"), ("HOME", "/h")];
        assert_eq!(path_with(&vars), Some(PathBuf::from("/x/zftl/default.img")));
        let vars = [("XDG_DATA_HOME", "relative"), ("HOME", "/h")];
        assert_eq!(
            path_with(&vars),
            Some(PathBuf::from("/h/.local/share/zftl/default.img"))
        );
        let vars = [("ZFTL_IMAGE", ""), ("HOME", "/h")];
        assert_eq!(
            path_with(&vars),
            Some(PathBuf::from("/h/.local/share/zftl/default.img"))
        );
    }

    #[test]
    fn nothing_set_is_an_error() {
        assert_eq!(path_with(&[]), None);
    }
}
