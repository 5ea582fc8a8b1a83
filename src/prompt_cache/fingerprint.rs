//! A compact fingerprint of an assembled prompt, and where a prompt first
//! differs from the one a previous fingerprint describes.
