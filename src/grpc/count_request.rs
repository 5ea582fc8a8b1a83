//! `CountTokensRequest`, written here instead of generated (`build.rs` maps
//! the proto message to this type): its text is a slice of the buffer the
//! message was decoded from, not a copy of it. prost decodes a `String` by
//! copying its bytes out of the received message; for the one RPC that is
//! a single large text, that copy was a pass over every byte (and over the
//! cache the counter's table needs). The wire format is the proto's: the
//! same tags and types, so clients generated from `proto/` are unaffected.
//! The text's UTF-8 is checked once, by [`CountTokensRequest::text`], where
//! prost would have checked it while copying.

use bytes::Bytes;

use super::status::malformed_status;

/// Count the tokens of a text (`context_assembler.v1.CountTokensRequest`).
#[derive(Clone, PartialEq, Eq, Hash, ::prost::Message)]
pub struct CountTokensRequest {
    /// The text, counted as ordinary text: UTF-8 (a `string` on the wire),
    /// held as received.
    #[prost(bytes = "bytes", tag = "3")]
    pub text: Bytes,
    /// Which tokenizer.
    #[prost(oneof = "count_tokens_request::Tokenizer", tags = "1, 2")]
    pub tokenizer: Option<count_tokens_request::Tokenizer>,
}

/// Nested types of [`CountTokensRequest`], where prost would put them.
pub mod count_tokens_request {
    /// Which tokenizer.
    #[derive(Clone, PartialEq, Eq, Hash, ::prost::Oneof)]
    pub enum Tokenizer {
        /// A model name (as in AssembleRequest.model).
        #[prost(string, tag = "1")]
        Model(String),
        /// An encoding name: "o200k_base" or "cl100k_base".
        #[prost(string, tag = "2")]
        Encoding(String),
    }
}

impl CountTokensRequest {
    /// The text, or INVALID_ARGUMENT when it is not UTF-8 (as prost answers
    /// a `string` field that is not, naming the field and never its bytes).
    pub fn text(&self) -> Result<&str, tonic::Status> {
        std::str::from_utf8(&self.text).map_err(|_| {
            malformed_status(
                "failed to decode Protobuf message: CountTokensRequest.text: invalid string value: data is \
                 not UTF-8 encoded",
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    /// The generated type this one replaces, as prost would have written it
    /// from the proto: the reference for the wire format.
    #[derive(Clone, PartialEq, ::prost::Message)]
    struct Generated {
        #[prost(string, tag = "3")]
        text: String,
        #[prost(oneof = "generated::Tokenizer", tags = "1, 2")]
        tokenizer: Option<generated::Tokenizer>,
    }

    mod generated {
        #[derive(Clone, PartialEq, ::prost::Oneof)]
        pub enum Tokenizer {
            #[prost(string, tag = "1")]
            Model(String),
            #[prost(string, tag = "2")]
            Encoding(String),
        }
    }

    /// The proto's message (from the descriptor set the server reflects) is
    /// the one written here: the same fields, numbers and types, and the
    /// same oneof. A field added to the proto fails this until it is added
    /// here too (prost would otherwise skip it as unknown).
    #[test]
    fn it_is_the_protos_message() {
        use prost_types::field_descriptor_proto::{Label, Type};

        let set = prost_types::FileDescriptorSet::decode(crate::grpc::pb::FILE_DESCRIPTOR_SET).unwrap();
        let message = set
            .file
            .iter()
            .filter(|f| f.package() == "context_assembler.v1")
            .flat_map(|f| &f.message_type)
            .find(|m| m.name() == "CountTokensRequest")
            .unwrap();
        let mut fields: Vec<(i32, &str, Type, Label, Option<&str>)> = message
            .field
            .iter()
            .map(|f| {
                let oneof = f
                    .oneof_index
                    .map(|i| message.oneof_decl[usize::try_from(i).unwrap()].name());
                (f.number(), f.name(), f.r#type(), f.label(), oneof)
            })
            .collect();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                (1, "model", Type::String, Label::Optional, Some("tokenizer")),
                (2, "encoding", Type::String, Label::Optional, Some("tokenizer")),
                (3, "text", Type::String, Label::Optional, None),
            ]
        );
    }

    fn pairs() -> Vec<(Generated, CountTokensRequest)> {
        use count_tokens_request::Tokenizer;
        let texts = ["", "hello", "naïve 東京 🦀\n\n  x"];
        let mut out = Vec::new();
        for text in texts {
            for which in 0..3 {
                let (g, ours) = match which {
                    0 => (None, None),
                    1 => (
                        Some(generated::Tokenizer::Model("gpt-4o".into())),
                        Some(Tokenizer::Model("gpt-4o".into())),
                    ),
                    _ => (
                        Some(generated::Tokenizer::Encoding(String::new())),
                        Some(Tokenizer::Encoding(String::new())),
                    ),
                };
                out.push((
                    Generated {
                        text: text.to_owned(),
                        tokenizer: g,
                    },
                    CountTokensRequest {
                        text: Bytes::from(text.to_owned()),
                        tokenizer: ours,
                    },
                ));
            }
        }
        out
    }

    #[test]
    fn it_is_the_generated_message_on_the_wire() {
        for (generated, ours) in pairs() {
            let bytes = generated.encode_to_vec();
            assert_eq!(ours.encode_to_vec(), bytes);
            let decoded = CountTokensRequest::decode(bytes.as_slice()).unwrap();
            assert_eq!(decoded, ours);
            assert_eq!(decoded.text().unwrap(), generated.text);
            assert_eq!(
                Generated::decode(ours.encode_to_vec().as_slice()).unwrap(),
                generated
            );
        }
    }

    #[test]
    fn the_text_is_a_slice_of_the_received_buffer() {
        let text = "a text long enough to be worth not copying ".repeat(100);
        let received = Bytes::from(
            Generated {
                text: text.clone(),
                tokenizer: None,
            }
            .encode_to_vec(),
        );
        let decoded = CountTokensRequest::decode(received.clone()).unwrap();
        let within = received.as_ptr_range();
        assert!(within.contains(&decoded.text.as_ptr()), "the text was copied");
        assert_eq!(decoded.text().unwrap(), text);
    }

    #[test]
    fn a_text_that_is_not_utf8_is_invalid_argument_naming_the_field() {
        for bad in [&[0xff_u8][..], b"ok \xc3\x28", b"\xed\xa0\x80", b"cut \xe6\x9d"] {
            let request = CountTokensRequest {
                text: Bytes::copy_from_slice(bad),
                tokenizer: None,
            };
            let status = request.text().unwrap_err();
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(
                status.message().contains("CountTokensRequest.text"),
                "{}",
                status.message()
            );
            // prost's own answer to the same bytes, for the generated type.
            let mut wire = Vec::new();
            prost::encoding::bytes::encode(3, &request.text, &mut wire);
            assert!(Generated::decode(wire.as_slice()).is_err());
        }
    }
}
