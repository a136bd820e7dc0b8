/**
 * The on-disk format of `FileEventLog` segments and the file operations it needs: framing,
 * scanning with torn-tail detection, appends that leave no partial record behind, atomic small files.
 *
 * @remarks
 * Internal to src/log: nothing here is exported from an index. A segment is a sequence of frames
 * `[u32 LE payload length][u32 LE crc32 of payload][payload]`, the payload being the UTF-8 JSON of a
 * {@link StoredRecord}. The crc makes a torn or zero-filled tail detectable after a crash, and damaged
 * bytes inside a segment detectable; each record carries its offset, so a scan can resynchronise on
 * the next valid frame and know which offsets the damaged bytes held (see {@link scanSegment}).
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

/**
 * One record as it is stored in a segment; topic and partition are implied by the file.
 *
 * @remarks
 * A record with `lost` is a marker written by repair in place of a record whose bytes were damaged:
 * it keeps the offset taken, names the quarantine file that holds the damaged bytes, and is never
 * returned by reads. Its other fields are empty (`type` is {@link LOST_RECORD_TYPE}), so a reader
 * that predates markers still sees a well-formed record and keeps the offsets after it.
 */
export interface StoredRecord {
  readonly offset: number;
  readonly id: string;
  readonly key: string;
  readonly type: string;
  readonly body: string;
  readonly uid?: string;
  readonly appendedAt: number;
  /** Set on a lost-offset marker: the file name (in the segment's directory) of the quarantine. */
  readonly lost?: string;
}

/** The `type` of a lost-offset marker. */
const LOST_RECORD_TYPE = 'harrier.lost';

/**
 * The fewest bytes a frame can take: the header and the JSON of a record whose strings are empty and
 * whose numbers are one digit. Damaged bytes of length `n` held at most `n / MIN_FRAME_BYTES` records.
 */
const MIN_FRAME_BYTES =
  FRAME_HEADER_BYTES + Buffer.byteLength('{"offset":0,"id":"","key":"","type":"","body":"","appendedAt":0}');

/**
 * How the payload of every frame this log writes begins: records are serialised with `offset` as
 * their first key. {@link scanSegment} resynchronises only on frames that begin so.
 */
const RECORD_PREFIX = Buffer.from('{"offset":', 'utf8');

/** The lost-offset marker of `offset`, pointing at the quarantine file `quarantine`. */
export function lostRecord(offset: number, appendedAt: number, quarantine: string): StoredRecord {
  return { offset, id: '', key: '', type: LOST_RECORD_TYPE, body: '', appendedAt, lost: quarantine };
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
    typeof r.appendedAt === 'number' &&
    (r.lost === undefined || typeof r.lost === 'string');
  return wellFormed ? (value as StoredRecord) : undefined;
}

/**
 * Bytes of a segment that are no valid record in sequence, found by {@link scanSegment}. Positions
 * are in the file as scanned.
 */
export interface SegmentDamage {
  /** File position of the first damaged byte: where the frame of `expectedOffset` should start. */
  readonly start: number;
  /** File position after the last damaged byte: the next valid frame, or the end of the file. */
  readonly end: number;
  /** The offset the first damaged frame should have held. */
  readonly expectedOffset: number;
  /**
   * Offset of the valid frame at `end`, on which the scan resynchronised; undefined when no valid
   * frame follows (a tail).
   */
  readonly nextOffset: number | undefined;
  /** `appendedAt` of the frame at `end`; undefined for a tail. */
  readonly nextAppendedAt: number | undefined;
  /**
   * True when the bytes look like an interrupted write rather than damage: the first frame runs past
   * the end of the file, or every byte is zero.
   */
  readonly tornWrite: boolean;
}

/**
 * Reads every frame of a segment from the start, calling `onRecord` for each record in sequence,
 * and returns the damaged byte ranges in file order (at most one, the last, without `nextOffset`).
 *
 * @remarks
 * A frame is in sequence when its crc verifies, its payload is a record, and its offset is the one
 * after the previous record (the first frame may hold any offset). At a frame that is not, the scan
 * resynchronises: it looks for the first later position where a frame verifies whose offset `o`
 * continues the sequence, `expected <= o <= expected + floor(skipped / MIN_FRAME_BYTES)` (the
 * damaged bytes cannot have held more records than that). Candidates are the positions 8 bytes
 * before each `{"offset":` (how every payload this log writes begins), so the search runs at memory
 * speed. A false match is not a practical risk: payloads are JSON text, whose bytes are all 0x20 or
 * above, so a length read from inside a payload is at least 512 MiB and fails the
 * {@link MAX_PAYLOAD_BYTES} check; a header that passes must then carry the crc32 of a payload that
 * parses as a record with an offset in that narrow window. When no frame verifies up to the end of
 * the file, the rest is a tail.
 *
 * @param baseOffset - the offset the first frame should hold (the base file): what a damaged first
 * frame is taken to have held.
 */
export async function scanSegment(
  handle: FileHandle,
  size: number,
  baseOffset: number,
  onRecord: (record: StoredRecord, position: number) => void,
): Promise<SegmentDamage[]> {
  const window = new SegmentWindow(handle, size);
  const damage: SegmentDamage[] = [];
  /** The offset the next frame must hold; undefined before the first record. */
  let expected: number | undefined;
  let position = 0;
  while (position < size) {
    const decoded = await window.decode(position);
    if (typeof decoded === 'object' && (expected === undefined || decoded.record.offset === expected)) {
      onRecord(decoded.record, position);
      expected = decoded.record.offset + 1;
      position += decoded.length;
      continue;
    }
    const expectedOffset = expected ?? baseOffset;
    // Before the first record the base file may be stale (a retention rewrite cut short), so the
    // lower bound is 0 there.
    const next = await window.resync(position, expected ?? 0, expectedOffset);
    if (next === undefined) {
      damage.push({
        start: position,
        end: size,
        expectedOffset,
        nextOffset: undefined,
        nextAppendedAt: undefined,
        tornWrite: decoded === 'incomplete' || (await window.allZeros(position, size)),
      });
      break;
    }
    damage.push({
      start: position,
      end: next.position,
      expectedOffset,
      nextOffset: next.record.offset,
      nextAppendedAt: next.record.appendedAt,
      tornWrite: false,
    });
    position = next.position;
    expected = next.record.offset;
  }
  return damage;
}

/** A read-ahead window over a segment file for {@link scanSegment}. */
class SegmentWindow {
  readonly #handle: FileHandle;
  readonly #size: number;
  #bytes = Buffer.alloc(0);
  /** File position of `#bytes[0]`. */
  #start = 0;

  constructor(handle: FileHandle, size: number) {
    this.#handle = handle;
    this.#size = size;
  }

  /** Decodes the frame at `position`; `'incomplete'` when the file ends inside it. */
  async decode(
    position: number,
  ): Promise<{ readonly record: StoredRecord; readonly length: number } | 'incomplete' | 'corrupt'> {
    const length = await this.#frameLength(position);
    if (typeof length === 'string') return length;
    await this.#cover(position, length);
    return decodeFrame(this.#bytes, position - this.#start);
  }

  /**
   * The first position after `from` holding a verified frame with an offset in
   * `[lowest, expected + floor((position - from) / MIN_FRAME_BYTES)]`, or undefined.
   */
  async resync(
    from: number,
    lowest: number,
    expected: number,
  ): Promise<{ readonly position: number; readonly record: StoredRecord } | undefined> {
    let position = from + 1;
    while (position + MIN_FRAME_BYTES <= this.#size) {
      await this.#cover(position, FRAME_HEADER_BYTES + RECORD_PREFIX.length);
      // Only a payload that starts like every record this log writes can be a frame.
      const hit = this.#bytes.indexOf(RECORD_PREFIX, position + FRAME_HEADER_BYTES - this.#start);
      if (hit < 0) {
        // A prefix cut by the end of the window is found from the next one.
        const windowEnd = this.#start + this.#bytes.length;
        position = Math.max(position + 1, windowEnd - RECORD_PREFIX.length + 1 - FRAME_HEADER_BYTES);
        continue;
      }
      const candidate = this.#start + hit - FRAME_HEADER_BYTES;
      const decoded = await this.decode(candidate);
      if (typeof decoded === 'object') {
        const { offset } = decoded.record;
        const most = expected + Math.floor((candidate - from) / MIN_FRAME_BYTES);
        if (offset >= lowest && offset <= most) return { position: candidate, record: decoded.record };
      }
      position = candidate + 1;
    }
    return undefined;
  }

  /** True when every byte of `[start, end)` is zero. */
  async allZeros(start: number, end: number): Promise<boolean> {
    for (let position = start; position < end;) {
      const length = Math.min(CHUNK_BYTES, end - position);
      await this.#cover(position, length);
      const at = position - this.#start;
      if (this.#bytes.subarray(at, at + length).some((byte) => byte !== 0)) return false;
      position += length;
    }
    return true;
  }

  /**
   * The length of the frame at `position` as its header says: `'incomplete'` when the header or the
   * frame runs past the end of the file, `'corrupt'` when the length is impossible.
   */
  async #frameLength(position: number): Promise<number | 'incomplete' | 'corrupt'> {
    if (position + FRAME_HEADER_BYTES > this.#size) return 'incomplete';
    await this.#cover(position, FRAME_HEADER_BYTES);
    const payloadLength = this.#bytes.readUInt32LE(position - this.#start);
    if (payloadLength === 0 || payloadLength > MAX_PAYLOAD_BYTES) return 'corrupt';
    const length = FRAME_HEADER_BYTES + payloadLength;
    return position + length > this.#size ? 'incomplete' : length;
  }

  /** Makes the window hold `[position, position + length)`, which lies inside the file. */
  async #cover(position: number, length: number): Promise<void> {
    if (position >= this.#start && position + length <= this.#start + this.#bytes.length) return;
    const want = Math.min(Math.max(CHUNK_BYTES, length), this.#size - position);
    const next = Buffer.allocUnsafe(want);
    // Keep what the old window already holds of the new one, to read each byte once.
    const overlap =
      position >= this.#start && position < this.#start + this.#bytes.length
        ? this.#bytes.copy(next, 0, position - this.#start)
        : 0;
    if (overlap < want) await readFully(this.#handle, next, overlap, want - overlap, position + overlap);
    this.#bytes = next;
    this.#start = position;
  }
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

/** Writes a file that must not exist yet (EEXIST otherwise), flushed when `sync`. */
export async function writeNewFile(path: string, content: string, sync = false): Promise<void> {
  const handle = await open(path, 'wx', 0o644);
  try {
    await handle.writeFile(content, 'utf8');
    if (sync) await handle.sync();
  } finally {
    await handle.close();
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
 * Writes a new file `to` from `parts` in order: a `[start, end)` pair copies those bytes of `from`, a
 * buffer is written as it is. Flushed when `sync`; removed again when a write fails.
 *
 * @param exclusive - refuse (EEXIST) when `to` exists, instead of replacing it.
 */
export async function writeParts(
  from: FileHandle,
  parts: readonly (readonly [number, number] | Uint8Array)[],
  to: string,
  sync: boolean,
  exclusive = false,
): Promise<void> {
  const handle = await open(to, exclusive ? 'wx' : 'w', 0o644);
  try {
    let written = 0;
    const longest = Math.max(1, ...parts.map((part) => (part instanceof Uint8Array ? 0 : part[1] - part[0])));
    const chunk = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, longest));
    for (const part of parts) {
      if (part instanceof Uint8Array) {
        await appendAt(handle, written, part, false);
        written += part.length;
        continue;
      }
      const [start, end] = part;
      for (let position = start; position < end;) {
        const length = Math.min(chunk.length, end - position);
        await readFully(from, chunk, 0, length, position);
        await appendAt(handle, written, chunk.subarray(0, length), false);
        written += length;
        position += length;
      }
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
