//! Envoy's external processor messages and service, generated from the
//! wire-compatible subset in `proto/vendor/` (its README says why a subset).

#![allow(missing_docs, clippy::all, clippy::pedantic)]

pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.config.core.v3.rs"));
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }
    pub mod extensions {
        pub mod filters {
            pub mod http {
                pub mod ext_proc {
                    pub mod v3 {
                        include!(concat!(
                            env!("OUT_DIR"),
                            "/envoy.extensions.filters.http.ext_proc.v3.rs"
                        ));
                    }
                }
            }
        }
    }
    pub mod service {
        pub mod ext_proc {
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.service.ext_proc.v3.rs"));
            }
        }
    }
}

pub use envoy::config::core::v3 as core;
pub use envoy::extensions::filters::http::ext_proc::v3 as mode;
pub use envoy::service::ext_proc::v3 as ext_proc;
