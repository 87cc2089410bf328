//! Forwarding of [`Backend`](zftl_core::Backend) calls for the bench's
//! device wrappers (a read counter, a zone check, a clock copy, the shape
//! recorder), which each change one or two calls and pass the rest on.
//! Rust does not allow a blanket impl of the core's trait over a trait of
//! this crate, so the forwarding methods are written by a macro.
//!
//! Included by path in `benches/` with `shape.rs`, so it depends on
//! `zftl_core` alone; its users have the macro by `#[macro_use]`.

/// Writes the [`Backend`](zftl_core::Backend) methods named as calls passed
/// on unchanged to the field named, inside an `impl Backend for` block of
/// one of the bench's wrappers, which write out only the methods they
/// watch or change: `forward_backend!(inner: reap, wait, in_flight);`.
macro_rules! forward_backend {
    ($field:ident: $($method:ident),+ $(,)?) => {
        $( forward_backend!(@one $field $method); )+
    };
    (@one $f:ident geometry) => {
        fn geometry(&self) -> &::zftl_core::Geometry {
            ::zftl_core::Backend::geometry(&self.$f)
        }
    };
    (@one $f:ident zone_info) => {
        fn zone_info(
            &mut self,
            zone: ::zftl_core::backend::ZoneId,
        ) -> Result<::zftl_core::ZoneInfo, ::zftl_core::DeviceError> {
            ::zftl_core::Backend::zone_info(&mut self.$f, zone)
        }
    };
    (@one $f:ident submit) => {
        fn submit(
            &mut self,
            tag: u64,
            command: ::zftl_core::Command,
        ) -> Result<(), ::zftl_core::SubmitError> {
            ::zftl_core::Backend::submit(&mut self.$f, tag, command)
        }
    };
    (@one $f:ident reap) => {
        fn reap(&mut self, out: &mut Vec<::zftl_core::Completion>, max: usize) -> usize {
            ::zftl_core::Backend::reap(&mut self.$f, out, max)
        }
    };
    (@one $f:ident wait) => {
        fn wait(&mut self) -> Result<(), ::zftl_core::DeviceError> {
            ::zftl_core::Backend::wait(&mut self.$f)
        }
    };
    (@one $f:ident in_flight) => {
        fn in_flight(&self) -> usize {
            ::zftl_core::Backend::in_flight(&self.$f)
        }
    };
    (@one $f:ident clock_ns) => {
        fn clock_ns(&self) -> u64 {
            ::zftl_core::Backend::clock_ns(&self.$f)
        }
    };
}
