//! Images in a provider request, counted by the provider's published rule,
//! never cut inside. Their size is read from the header of a base64 image
//! (PNG, GIF, JPEG, WebP; only the first bytes are decoded); an image given
//! by URL, or one whose header is not understood, counts the provider's
//! most per image and makes the total an estimate.
//!
//! - OpenAI: `low` detail is 85 tokens; otherwise the image is fitted into
//!   2048 x 2048, its shorter side brought down to 768, and each 512-pixel
//!   tile costs 170 on top of the 85 (at most 8 tiles: 1,445).
//! - Anthropic: an image whose long side passes 1,568 pixels, or whose area
//!   passes 1,600 tokens' worth, is scaled down first; it then costs
//!   width x height / 750 (at most 1,600).
//! - Gemini: both sides at most 384 pixels is 258 tokens; a larger image is
//!   cut into 768-pixel tiles of 258 each. Gemini 3's `media_resolution`
//!   costs up to 2,240, the count of an image of unknown size.

use base64::Engine as _;

use crate::tokens::provider::Provider;

/// Whose rule counts an image (the model's provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Media {
    /// OpenAI's tiles by detail (also self-hosted engines: the most
    /// common rule of OpenAI-compatible servers).
    OpenAi,
    /// Anthropic's area rule.
    Anthropic,
    /// Gemini's tiles.
    Gemini,
}

impl Media {
    /// The rule of a model's provider.
    pub fn of(provider: Provider) -> Media {
        match provider {
            Provider::Anthropic | Provider::Bedrock => Media::Anthropic,
            Provider::Gemini => Media::Gemini,
            _ => Media::OpenAi,
        }
    }
}

/// An image's tokens, and whether that is the provider's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// Tokens.
    pub tokens: u32,
    /// Whether the size was known (else the provider's most per image).
    pub exact: bool,
}

/// OpenAI's most per image (8 tiles).
const OPENAI_MOST: u32 = 85 + 170 * 8;
/// Anthropic's most per image (after its resize).
const ANTHROPIC_MOST: u32 = 1600;
/// Gemini's most per image (Gemini 3 at its highest `media_resolution`).
const GEMINI_MOST: u32 = 2240;
/// Base64 characters decoded to find a size (48 KiB of image: room for a
/// JPEG's metadata before its frame header).
const HEADER_BASE64_CHARS: usize = 64 * 1024;

/// An image of a request, as far as its size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Image {
    /// Width and height, read from its header.
    pub size: Option<(u32, u32)>,
    /// OpenAI's `detail: "low"`.
    pub low: bool,
}

impl Image {
    /// An image given as a URL (`data:` URLs carry the image itself), with
    /// OpenAI's `detail` when given.
    pub fn of_url(url: &str, detail: Option<&str>) -> Image {
        let size = url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
            .and_then(|(_, data)| size_of_base64(data));
        Image {
            size,
            low: detail == Some("low"),
        }
    }

    /// An image given as base64 data (Anthropic's `source`).
    pub fn of_base64(data: &str) -> Image {
        Image {
            size: size_of_base64(data),
            low: false,
        }
    }

    /// Its tokens under `rule`.
    pub fn count(self, rule: Media) -> Counted {
        if rule == Media::OpenAi && self.low {
            return Counted {
                tokens: 85,
                exact: true,
            };
        }
        let Some((w, h)) = self.size.filter(|&(w, h)| w > 0 && h > 0) else {
            let tokens = match rule {
                Media::OpenAi => OPENAI_MOST,
                Media::Anthropic => ANTHROPIC_MOST,
                Media::Gemini => GEMINI_MOST,
            };
            return Counted { tokens, exact: false };
        };
        let tokens = match rule {
            Media::OpenAi => openai(w, h),
            Media::Anthropic => anthropic(w, h),
            Media::Gemini => gemini(w, h),
        };
        Counted { tokens, exact: true }
    }
}

/// OpenAI's tiles (high or auto detail).
pub fn openai(w: u32, h: u32) -> u32 {
    let (mut w, mut h) = (f64::from(w), f64::from(h));
    if w > 2048.0 || h > 2048.0 {
        let s = 2048.0 / w.max(h);
        (w, h) = (w * s, h * s);
    }
    if w.min(h) > 768.0 {
        let s = 768.0 / w.min(h);
        (w, h) = (w * s, h * s);
    }
    let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
    85 + 170 * tiles as u32
}

/// Anthropic's area rule after its resize limits.
pub fn anthropic(w: u32, h: u32) -> u32 {
    let (mut w, mut h) = (f64::from(w), f64::from(h));
    let long = w.max(h);
    if long > 1568.0 {
        let s = 1568.0 / long;
        (w, h) = (w * s, h * s);
    }
    let most_area = f64::from(ANTHROPIC_MOST) * 750.0;
    if w * h > most_area {
        let s = (most_area / (w * h)).sqrt();
        (w, h) = (w * s, h * s);
    }
    ((w.floor() * h.floor()) / 750.0)
        .ceil()
        .min(f64::from(ANTHROPIC_MOST)) as u32
}

/// Gemini 2.x's tiles.
pub fn gemini(w: u32, h: u32) -> u32 {
    if w <= 384 && h <= 384 {
        return 258;
    }
    let tiles = u64::from(w.div_ceil(768)) * u64::from(h.div_ceil(768));
    u32::try_from(258 * tiles).unwrap_or(u32::MAX)
}

/// The size of a base64 image, from its first bytes.
fn size_of_base64(data: &str) -> Option<(u32, u32)> {
    let mut head = &data.as_bytes()[..data.len().min(HEADER_BASE64_CHARS)];
    head = &head[..head.len() - head.len() % 4];
    let bytes = base64::engine::general_purpose::STANDARD.decode(head).ok()?;
    size_of(&bytes)
}

/// The width and height in an image's header (PNG, GIF, JPEG, WebP).
pub fn size_of(b: &[u8]) -> Option<(u32, u32)> {
    let be16 = |i: usize| Some(u32::from(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let le16 = |i: usize| Some(u32::from(u16::from_le_bytes([*b.get(i)?, *b.get(i + 1)?])));
    let be32 = |i: usize| {
        Some(u32::from_be_bytes([
            *b.get(i)?,
            *b.get(i + 1)?,
            *b.get(i + 2)?,
            *b.get(i + 3)?,
        ]))
    };
    let le24 = |i: usize| {
        Some(u32::from(*b.get(i)?) | u32::from(*b.get(i + 1)?) << 8 | u32::from(*b.get(i + 2)?) << 16)
    };
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be32(16)?, be32(20)?));
    }
    if b.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if b.starts_with(b"RIFF") && b.get(8..12) == Some(b"WEBP") {
        return match b.get(12..16)? {
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let (b1, b2, b3, b4) = (
                    u32::from(*b.get(21)?),
                    u32::from(*b.get(22)?),
                    u32::from(*b.get(23)?),
                    u32::from(*b.get(24)?),
                );
                Some((
                    1 + (b1 | (b2 & 0x3f) << 8),
                    1 + (b2 >> 6 | b3 << 2 | (b4 & 0xf) << 10),
                ))
            }
            b"VP8X" => Some((1 + le24(24)?, 1 + le24(27)?)),
            _ => None,
        };
    }
    if b.starts_with(&[0xff, 0xd8]) {
        // Walk the segments to the first frame header (SOF0-15, less the
        // DHT, JPG and DAC markers).
        let mut i = 2;
        while i + 4 <= b.len() {
            if b[i] != 0xff {
                return None;
            }
            let marker = b[i + 1];
            if marker == 0xff {
                i += 1;
                continue;
            }
            if (0xc0..=0xcf).contains(&marker) && !matches!(marker, 0xc4 | 0xc8 | 0xcc) {
                return Some((be16(i + 7)?, be16(i + 5)?));
            }
            i += 2 + be16(i + 2)? as usize;
        }
    }
    None
}

/// Media tokens of a request: all of them (taken from the budget before
/// the assembly), the system prompt's, each turn's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MediaTokens {
    /// Every image's tokens (taken from the budget before the fit).
    pub all: u32,
    /// The system prompt's.
    pub system: u32,
    /// Each turn's.
    pub per_turn: Vec<u32>,
    /// Whether every count is the provider's own.
    pub exact: bool,
}

impl Media {
    /// The images of a parsed body, those of its system prompt and of each
    /// turn, counted by this rule (`published`: the model's own rule, else
    /// an estimate).
    pub fn counted<'i>(
        system: &[Image],
        turns: impl IntoIterator<Item = &'i [Image]>,
        rule: Media,
        published: bool,
    ) -> MediaTokens {
        let mut exact = published;
        let mut sum = |images: &[Image]| {
            images.iter().fold(0u32, |acc, i| {
                let c = i.count(rule);
                exact &= c.exact;
                acc.saturating_add(c.tokens)
            })
        };
        let system = sum(system);
        let per_turn: Vec<u32> = turns.into_iter().map(&mut sum).collect();
        let all = per_turn.iter().fold(system, |a, &b| a.saturating_add(b));
        MediaTokens {
            all,
            system,
            per_turn,
            exact,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_tiles_follow_the_published_examples() {
        // OpenAI's own examples: 1024 x 1024 is 765, 2048 x 4096 is 1105.
        assert_eq!(openai(1024, 1024), 765);
        assert_eq!(openai(2048, 4096), 1105);
        let low = Image {
            size: Some((4096, 4096)),
            low: true,
        };
        assert_eq!(low.count(Media::OpenAi).tokens, 85);
        assert_eq!(
            Image::default().count(Media::OpenAi),
            Counted {
                tokens: 1445,
                exact: false
            }
        );
    }

    #[test]
    fn anthropic_is_area_over_750_after_its_resize() {
        // Anthropic's table: 1000 x 1000 is about 1334; 200 x 200 about 54.
        assert_eq!(anthropic(1000, 1000), 1334);
        assert_eq!(anthropic(200, 200), 54);
        assert!(anthropic(8000, 8000) <= ANTHROPIC_MOST);
        assert_eq!(anthropic(1092, 1092), 1590);
    }

    #[test]
    fn gemini_small_images_are_one_tile() {
        assert_eq!(gemini(384, 384), 258);
        assert_eq!(gemini(1000, 1000), 258 * 4);
        // A hostile header's size saturates, never wraps.
        assert_eq!(gemini(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn sizes_are_read_from_headers() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend(640u32.to_be_bytes());
        png.extend(480u32.to_be_bytes());
        assert_eq!(size_of(&png), Some((640, 480)));
        let gif = b"GIF89a\x20\x03\x58\x02";
        assert_eq!(size_of(gif), Some((800, 600)));
        // A JPEG with one APP0 segment before its SOF0.
        let mut jpeg = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0x00, 0x00];
        jpeg.extend([0xff, 0xc0, 0x00, 0x11, 0x08, 0x01, 0xe0, 0x02, 0x80]);
        assert_eq!(size_of(&jpeg), Some((640, 480)));
        let mut vp8x = b"RIFF\0\0\0\0WEBPVP8X".to_vec();
        vp8x.extend([0u8; 8]);
        vp8x.extend([0x7f, 0x02, 0x00, 0xdf, 0x01, 0x00]);
        assert_eq!(size_of(&vp8x), Some((640, 480)));
        assert_eq!(size_of(b"not an image"), None);
        assert_eq!(size_of(&[0xff, 0xd8, 0xff]), None);
    }

    #[test]
    fn a_data_url_is_decoded_only_as_far_as_its_header() {
        let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
        png.extend(1024u32.to_be_bytes());
        png.extend(1024u32.to_be_bytes());
        png.extend(vec![0u8; 200_000]);
        let data = base64::engine::general_purpose::STANDARD.encode(&png);
        let url = format!("data:image/png;base64,{data}");
        let image = Image::of_url(&url, None);
        assert_eq!(
            image.count(Media::OpenAi),
            Counted {
                tokens: 765,
                exact: true
            }
        );
        assert!(
            !Image::of_url("https://example.invalid/a.png", None)
                .count(Media::OpenAi)
                .exact
        );
        assert_eq!(
            Image::of_base64(&data).count(Media::Anthropic).tokens,
            anthropic(1024, 1024)
        );
    }
}
