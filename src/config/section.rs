//! How one layer of the configuration lies over another ([`Layer`]), and
//! the declaration of a table of the file ([`section!`]): the schema's
//! tables (`file`, `auth`) are declared with it, so it sits apart from them.

/// One layer of settings over another.
pub trait Layer {
    /// `self` over `base`: every value `self` sets wins.
    fn over(self, base: Self) -> Self;
}

/// A value wins whole: a list or a table given replaces the one below.
impl<T> Layer for Option<T> {
    fn over(self, base: Self) -> Self {
        self.or(base)
    }
}

/// Declares a table of the file: the struct, rejecting unknown keys, and its
/// [`Layer`], which lays each field over the base's.
macro_rules! section {
    ($(#[$meta:meta])* pub struct $name:ident { $($(#[$fmeta:meta])* pub $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl $crate::config::section::Layer for $name {
            fn over(self, base: Self) -> Self {
                $name { $($field: self.$field.over(base.$field),)* }
            }
        }
    };
}
pub(super) use section;
