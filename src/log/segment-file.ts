/**
 * The on-disk format of `FileEventLog` segments and the file operations it needs: framing,
 * scanning with torn-tail detection, appends that leave no partial record behind, atomic small files.
 *
 * @remarks
 * Internal to src/log: nothing here is exported from an index. A segment is a sequence of frames
 * `[u32 LE payload length][u32 LE crc32 of payload][payload]`, the payload being the UTF-8 JSON of a
 * {@link StoredRecord}. The crc makes a torn or zero-filled tail detectable after a crash.
 *
 * @packageDocumentation
 */
import { constants as fsConstants } from 'node:fs';
import { open, rename, rm, type FileHandle } from 'node:fs/promises';
import { dirname } from 'node:path';
import { crc32 } from 'node:zlib';

/** Bytes of a frame header: payload length and crc32. */
export const FRAME_HEADER_BYTES = 8;

/** A payload longer than this is taken as a corrupt length field (256 MiB). */
export const MAX_PAYLOAD_BYTES = 256 * 1024 * 1024;

/** Bytes read from a segment at once when scanning or reading records. */
const CHUNK_BYTES = 1024 * 1024;

/** One record as it is stored in a segment; topic and partition are implied by the file. */
export interface StoredRecord {
  readonly offset: number;
  readonly id: string;
  readonly key: string;
  readonly type: string;
  readonly body: string;
  readonly uid?: string;
  readonly appendedAt: number;
}

/** Encodes a record as one frame. */
export function encodeFrame(record: StoredRecord): Buffer {
  const payload = Buffer.from(JSON.stringify(record), 'utf8');
  const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + payload.length);
  frame.writeUInt32LE(payload.length, 0);
  frame.writeUInt32LE(crc32(payload), 4);
  payload.copy(frame, FRAME_HEADER_BYTES);
  return frame;
}

/**
 * Decodes the frame at `at` in `bytes`: the record and the frame's length, `'incomplete'` when
 * `bytes` ends inside the frame, or `'corrupt'` when the header, crc or payload is not a record.
 */
export function decodeFrame(
  bytes: Buffer,
  at: number,
): { readonly record: StoredRecord; readonly length: number } | 'incomplete' | 'corrupt' {
  if (bytes.length - at < FRAME_HEADER_BYTES) return 'incomplete';
  const payloadLength = bytes.readUInt32LE(at);
  if (payloadLength === 0 || payloadLength > MAX_PAYLOAD_BYTES) return 'corrupt';
  const end = at + FRAME_HEADER_BYTES + payloadLength;
  if (bytes.length < end) return 'incomplete';
  const payload = bytes.subarray(at + FRAME_HEADER_BYTES, end);
  if (crc32(payload) !== bytes.readUInt32LE(at + 4)) return 'corrupt';
  const record = parseRecord(payload.toString('utf8'));
  return record === undefined ? 'corrupt' : { record, length: end - at };
}

function parseRecord(json: string): StoredRecord | undefined {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (typeof value !== 'object' || value === null) return undefined;
  const r = value as Record<string, unknown>;
  const wellFormed =
    Number.isSafeInteger(r.offset) &&
    (r.offset as number) >= 0 &&
    typeof r.id === 'string' &&
    typeof r.key === 'string' &&
    typeof r.type === 'string' &&
    typeof r.body === 'string' &&
    (r.uid === undefined || typeof r.uid === 'string') &&
    typeof r.appendedAt === 'number';
  return wellFormed ? (value as StoredRecord) : undefined;
}

/**
 * Reads every whole frame of a segment from the start, calling `onRecord` for each, and returns the
 * length of the valid prefix: where the first torn or corrupt frame starts, or `size`.
 *
 * @param accept - called before `onRecord`; a record it rejects (an offset out of sequence) ends the
 * valid prefix just like a corrupt frame.
 */
export async function scanSegment(
  handle: FileHandle,
  size: number,
  accept: (record: StoredRecord) => boolean,
  onRecord: (record: StoredRecord, position: number) => void,
): Promise<number> {
  let buffer = Buffer.alloc(0);
  /** File position of `buffer[0]`. */
  let bufferStart = 0;
  let position = 0;
  while (position < size) {
    const decoded = decodeFrame(buffer, position - bufferStart);
    if (decoded === 'corrupt') return position;
    if (decoded === 'incomplete') {
      const have = bufferStart + buffer.length - position;
      if (bufferStart + buffer.length >= size) return position;
      // Grow the window to hold at least the whole frame whose header we may already have.
      const header = have >= FRAME_HEADER_BYTES ? buffer.readUInt32LE(position - bufferStart) : 0;
      const want = Math.min(Math.max(CHUNK_BYTES, FRAME_HEADER_BYTES + header), size - position);
      const next = Buffer.allocUnsafe(want);
      const carried = buffer.copy(next, 0, position - bufferStart);
      await readFully(handle, next, carried, want - carried, position + carried);
      buffer = next;
      bufferStart = position;
      continue;
    }
    if (!accept(decoded.record)) return position;
    onRecord(decoded.record, position);
    position += decoded.length;
  }
  return position;
}

/**
 * Reads the frames between `start` and `end` (whole frames, as the log's index knows them).
 * @throws Error when a frame in the range does not decode: the file changed under the log.
 */
export async function readFrames(handle: FileHandle, start: number, end: number): Promise<StoredRecord[]> {
  const records: StoredRecord[] = [];
  let position = start;
  while (position < end) {
    const length = Math.min(end - position, CHUNK_BYTES);
    let bytes = Buffer.allocUnsafe(length);
    await readFully(handle, bytes, 0, length, position);
    let at = 0;
    for (;;) {
      const decoded = decodeFrame(bytes, at);
      if (decoded === 'corrupt') throw new Error(`corrupt frame at byte ${position + at}`);
      if (decoded === 'incomplete') {
        if (at === 0) {
          // A frame longer than the chunk: read exactly that frame.
          const frameLength = FRAME_HEADER_BYTES + bytes.readUInt32LE(0);
          if (position + frameLength > end) throw new Error(`frame at byte ${position} runs past ${end}`);
          bytes = Buffer.allocUnsafe(frameLength);
          await readFully(handle, bytes, 0, frameLength, position);
          continue;
        }
        break;
      }
      records.push(decoded.record);
      at += decoded.length;
      if (position + at >= end) break;
    }
    position += at;
  }
  return records;
}

async function readFully(
  handle: FileHandle,
  into: Buffer,
  offset: number,
  length: number,
  position: number,
): Promise<void> {
  let done = 0;
  while (done < length) {
    const { bytesRead } = await handle.read(into, offset + done, length - done, position + done);
    if (bytesRead === 0) throw new Error(`unexpected end of file at byte ${position + done}`);
    done += bytesRead;
  }
}

/** The calls {@link appendAt} makes on a segment file: the part of a `FileHandle` it needs. */
export interface WritableSegment {
  write(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position: number,
  ): Promise<{ readonly bytesWritten: number }>;
  datasync(): Promise<void>;
  truncate(length: number): Promise<void>;
}

/**
 * Why {@link appendAt} failed, and whether the file was put back to its length before the append.
 */
export class AppendFailure extends Error {
  /** True when the partial write was truncated away: the file is as it was before the append. */
  readonly restored: boolean;
  /** Why truncating back failed, when it did. */
  readonly truncateError: unknown;

  constructor(cause: unknown, restored: boolean, truncateError?: unknown) {
    super(
      restored
        ? `append failed and was truncated back: ${describeError(cause)}`
        : `append failed (${describeError(cause)}) and truncating it back failed too: ${describeError(truncateError)}`,
      { cause },
    );
    this.name = 'AppendFailure';
    this.restored = restored;
    this.truncateError = truncateError;
  }
}

/**
 * Writes `bytes` at `position` (the file's committed length), then flushes them to disk when `sync`.
 *
 * @remarks
 * A short write is continued until every byte is written. When a write or the flush fails, the file
 * is truncated back to `position` so no partial record stays behind a later append.
 *
 * @throws AppendFailure with `restored: true` when the file is back at `position`, `false` when
 * truncating failed too and the file may end in a partial record.
 */
export async function appendAt(
  file: WritableSegment,
  position: number,
  bytes: Uint8Array,
  sync: boolean,
): Promise<void> {
  try {
    let done = 0;
    while (done < bytes.length) {
      const { bytesWritten } = await file.write(bytes, done, bytes.length - done, position + done);
      if (bytesWritten <= 0) throw new Error(`write made no progress at byte ${position + done}`);
      done += bytesWritten;
    }
    if (sync) await file.datasync();
  } catch (error) {
    try {
      await file.truncate(position);
    } catch (truncateError) {
      throw new AppendFailure(error, false, truncateError);
    }
    throw new AppendFailure(error, true);
  }
}

/** Opens a file for positional reads and writes, creating it when missing. */
export function openReadWrite(path: string): Promise<FileHandle> {
  return open(path, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o644);
}

/**
 * Replaces `path` with `data` atomically: written to `path.tmp`, flushed when `sync`, then renamed
 * over `path` (and the directory flushed), so a crash leaves the old file or the new one, never half.
 */
export async function writeFileAtomic(path: string, data: string, sync: boolean): Promise<void> {
  const tmp = `${path}.tmp`;
  const handle = await open(tmp, 'w', 0o644);
  try {
    await handle.writeFile(data, 'utf8');
    if (sync) await handle.sync();
  } finally {
    await handle.close();
  }
  await rename(tmp, path);
  if (sync) await syncDirectory(dirname(path));
}

/**
 * Copies bytes `[start, end)` of `from` into a new file `to` (replacing any), flushed when `sync`.
 */
export async function copyRange(
  from: FileHandle,
  start: number,
  end: number,
  to: string,
  sync: boolean,
): Promise<void> {
  const handle = await open(to, 'w', 0o644);
  try {
    const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, Math.max(1, end - start)));
    let position = start;
    while (position < end) {
      const length = Math.min(chunk.length, end - position);
      await readFully(from, chunk, 0, length, position);
      await appendAt(handle, position - start, chunk.subarray(0, length), false);
      position += length;
    }
    if (sync) await handle.sync();
  } catch (error) {
    await handle.close();
    await rm(to, { force: true });
    throw error;
  }
  await handle.close();
}

/**
 * Flushes a directory's entries (new, renamed and removed files) to disk.
 *
 * @remarks
 * Windows cannot open a directory for flushing and orders its metadata itself; there this does
 * nothing.
 */
export async function syncDirectory(path: string): Promise<void> {
  if (process.platform === 'win32') return;
  const handle = await open(path, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** An error as `CODE: message` (the errno code, when it has one). */
export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === undefined ? error.message : `${code}: ${error.message}`;
  }
  return String(error);
}
