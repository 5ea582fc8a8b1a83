//! The protobuf codec of the generated services: prost's, timed. The server
//! decodes requests and encodes responses; those two are recorded as the
//! `decode` and `encode` phases. A client built from the same stubs does the
//! opposite (encodes requests, decodes responses), which is not recorded, so
//! in-process clients (tests, examples) do not blur the server's figures.
//! A request that is not valid protobuf is `INVALID_ARGUMENT` (prost's
//! codec says `INTERNAL`, which would page someone for a client's bug).

use std::marker::PhantomData;
use std::time::Instant;

use prost::Message;
use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

use super::pb;
use super::status::malformed_status;
use crate::telemetry::metrics;

/// tonic's default yield threshold (an encoder's setting: unused by a
/// decoder, but a part of its settings).
const YIELD_THRESHOLD_BYTES: usize = 32 << 10;
/// A response's encode buffer at first: room for the frame header and a
/// short answer; a longer one reserves its length once.
const ENCODE_START_BYTES: usize = 256;

/// Whether a message type is a request (decoded by the server) or a response
/// (encoded by the server).
pub trait Direction {
    /// True for request messages.
    const REQUEST: bool;
    /// Whether its time is a phase of assembling (the memory RPCs' messages
    /// are not).
    const TIMED: bool = true;
}

macro_rules! direction {
    ($request:expr => $($t:ty),+ $(,)?) => {
        $(impl Direction for $t {
            const REQUEST: bool = $request;
        })+
    };
    (untimed $request:expr => $($t:ty),+ $(,)?) => {
        $(impl Direction for $t {
            const REQUEST: bool = $request;
            const TIMED: bool = false;
        })+
    };
}

direction!(true =>
    pb::AssembleRequest,
    pb::CountTokensRequest,
    pb::ListModelsRequest,
    pb::AssembleBatchRequest,
    pb::ReportUsageRequest,
    pb::CompactRequest,
);
direction!(false =>
    pb::AssembleResponse,
    pb::CountTokensResponse,
    pb::ListModelsResponse,
    pb::AssembleBatchResponse,
    pb::AssembleStreamResponse,
    pb::ReportUsageResponse,
    pb::CompactResponse,
);
direction!(untimed true => pb::RetainRequest, pb::ForgetRequest, pb::ListMemoriesRequest);
direction!(untimed false => pb::RetainResponse, pb::ForgetResponse, pb::ListMemoriesResponse);

/// [`ProstCodec`] that records server-side decode and encode time.
#[derive(Debug, Clone)]
pub struct TimedCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for TimedCodec<T, U> {
    fn default() -> Self {
        TimedCodec(PhantomData)
    }
}

impl<T, U> Codec for TimedCodec<T, U>
where
    T: Message + Direction + Send + 'static,
    U: Message + Direction + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = TimedEncoder<T>;
    type Decoder = TimedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        TimedEncoder(ProstCodec::<T, U>::raw_encoder(BufferSettings::default()))
    }

    fn decoder(&mut self) -> Self::Decoder {
        TimedDecoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

/// Prost's encoder, timed for response messages.
#[derive(Debug, Clone)]
pub struct TimedEncoder<T>(ProstEncoder<T>);

impl<T: Message + Direction> Encoder for TimedEncoder<T> {
    type Item = T;
    type Error = Status;

    fn encode(&mut self, item: T, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        if T::REQUEST {
            return self.0.encode(item, buf);
        }
        let started = T::TIMED.then(Instant::now);
        // Room for the whole message at once (see `buffer_settings`).
        buf.reserve(item.encoded_len());
        let out = self.0.encode(item, buf);
        if let Some(started) = started {
            metrics::phase(metrics::PHASE_ENCODE, started.elapsed());
        }
        out
    }

    /// A response's buffer starts small: `encode` reserves the message's
    /// whole length at once, where growing tonic's 8 KiB start to a larger
    /// answer copied it (a warm 4k Assemble answers about 22 KB). (Never 0: tonic grows a compression buffer in steps of
    /// this size, dividing by it; the server compresses no response.)
    fn buffer_settings(&self) -> BufferSettings {
        if T::REQUEST {
            self.0.buffer_settings()
        } else {
            BufferSettings::new(ENCODE_START_BYTES, YIELD_THRESHOLD_BYTES)
        }
    }
}

/// Prost's decoder, timed for request messages.
#[derive(Debug, Clone)]
pub struct TimedDecoder<U>(ProstDecoder<U>);

impl<U: Message + Direction + Default> Decoder for TimedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        if !U::REQUEST {
            return self.0.decode(buf);
        }
        let started = Instant::now();
        let out = self.0.decode(buf);
        if U::TIMED {
            metrics::phase(metrics::PHASE_DECODE, started.elapsed());
        }
        // prost's codec calls a malformed request INTERNAL; it is the
        // caller's fault. The message names the field path, never content.
        out.map_err(|s| malformed_status(s.message()))
    }

    /// A request's decode buffer starts empty, so that it adopts the
    /// buffer the gate passes each message in (see
    /// `gate::received::Received::take`) instead of copying the message into
    /// one of its own. Responses (decoded by clients) keep prost's settings.
    /// (tonic grows a decompression buffer in steps of this size, dividing
    /// by it: the server accepts no compressed request, never calling
    /// `accept_compressed`, and `tests/limits/hostile.rs` sends compressed
    /// ones under every encoding name.)
    fn buffer_settings(&self) -> BufferSettings {
        if U::REQUEST {
            BufferSettings::new(0, YIELD_THRESHOLD_BYTES)
        } else {
            self.0.buffer_settings()
        }
    }
}
