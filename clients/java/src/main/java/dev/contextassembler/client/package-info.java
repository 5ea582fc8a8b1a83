/**
 * A small helper over the generated stubs of {@code dev.contextassembler.v1}: {@link
 * dev.contextassembler.client.AssemblerChannels} builds channels with sensible defaults, and
 * {@link dev.contextassembler.client.AssemblerErrors} decodes the sidecar's rich error details.
 */
package dev.contextassembler.client;
