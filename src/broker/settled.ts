/**
 * One promise, resolved at load, that a broker returns from `publish`, `ack` or `nack` when the work
 * is done already: the in-memory broker's, and the BullMQ broker's settle, which hands the outcome to
 * the job's processor at once.
 *
 * @remarks
 * A caller that sees this very promise knows the step has settled without waiting a tick for it: the
 * dispatcher then arms no deadline and awaits nothing (about four promises and two ticks less per
 * ack on the in-memory send path). Any other promise is treated as possibly pending. Sharing one
 * resolved promise is safe: a settled promise never changes, and every `then` on it gets its own.
 */
export const SETTLED: Promise<void> = Promise.resolve();
