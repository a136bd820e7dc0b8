/**
 * The append primitive of FileEventLog segments with a file whose calls fail on demand.
 *
 * @remarks
 * A real failing file covers the main path (test/e2e/file-event-log-crash.test.ts runs an append
 * into EFBIG under `ulimit -f`). What no real file can be made to do on demand is fail its truncate
 * after a failed write, the path that leaves a partition refusing appends; that is tested here
 * against the small interface `appendAt` takes, without a test hook in FileEventLog's public API.
 */
import { describe, expect, it } from 'vitest';
import {
  AppendFailure,
  appendAt,
  decodeFrame,
  encodeFrame,
  FRAME_HEADER_BYTES,
  type WritableSegment,
} from '../../../src/log/segment-file.js';

/** An in-memory file: `writeLimit` bytes can be written in all, then writes fail. */
class FakeSegment implements WritableSegment {
  bytes = Buffer.alloc(0);
  readonly calls: string[] = [];
  constructor(
    private readonly behaviour: {
      readonly writeLimit?: number;
      readonly failSync?: boolean;
      readonly failTruncate?: boolean;
    } = {},
  ) {}

  async write(buffer: Uint8Array, offset: number, length: number, position: number) {
    const room = (this.behaviour.writeLimit ?? Infinity) - position;
    if (room <= 0) {
      this.calls.push('write EFBIG');
      throw Object.assign(new Error('File too large'), { code: 'EFBIG' });
    }
    const written = Math.min(length, room);
    const end = position + written;
    if (this.bytes.length < end)
      this.bytes = Buffer.concat([this.bytes, Buffer.alloc(end - this.bytes.length)]);
    Buffer.from(buffer).copy(this.bytes, position, offset, offset + written);
    this.calls.push(`write ${written}`);
    return { bytesWritten: written };
  }

  async datasync() {
    this.calls.push('datasync');
    if (this.behaviour.failSync === true) throw Object.assign(new Error('I/O error'), { code: 'EIO' });
  }

  async truncate(length: number) {
    this.calls.push(`truncate ${length}`);
    if (this.behaviour.failTruncate === true) throw Object.assign(new Error('I/O error'), { code: 'EIO' });
    this.bytes = this.bytes.subarray(0, length);
  }
}

const frame = encodeFrame({ offset: 3, id: 'e', key: 'k', type: 't', body: '{"a":1}', appendedAt: 1 });

describe('appendAt', () => {
  describe('when the write is cut short', () => {
    it('writes the rest, then flushes', async () => {
      const file = new FakeSegment();
      const original = file.write.bind(file);
      let first = true;
      file.write = async (buffer, offset, length, position) => {
        const cut = first ? Math.min(length, 5) : length;
        first = false;
        return original(buffer, offset, cut, position);
      };
      await appendAt(file, 0, frame, true);
      expect(file.calls).toEqual(['write 5', `write ${frame.length - 5}`, 'datasync']);
      expect(file.bytes.equals(frame)).toBe(true);
    });
  });

  describe('when the write fails halfway', () => {
    it('truncates the file back and throws AppendFailure restored', async () => {
      const file = new FakeSegment({ writeLimit: 10 + 20 });
      await appendAt(file, 0, Buffer.alloc(10, 1), false);
      const error = await appendAt(file, 10, frame, true).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AppendFailure);
      expect(error).toMatchObject({ restored: true });
      expect(file.calls.slice(-3)).toEqual(['write 20', 'write EFBIG', 'truncate 10']);
      expect(file.bytes.length).toBe(10);
    });
  });

  describe('when the flush fails', () => {
    it('truncates the written record away', async () => {
      const file = new FakeSegment({ failSync: true });
      const error = await appendAt(file, 0, frame, true).catch((e: unknown) => e);
      expect(error).toMatchObject({ restored: true });
      expect((error as AppendFailure).message).toContain('EIO');
      expect(file.bytes.length).toBe(0);
    });
  });

  describe('when truncating back fails too', () => {
    it('throws AppendFailure not restored, with both causes', async () => {
      const file = new FakeSegment({ writeLimit: 12, failTruncate: true });
      const error = await appendAt(file, 0, frame, false).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(AppendFailure);
      expect(error).toMatchObject({ restored: false });
      expect((error as AppendFailure).cause).toMatchObject({ code: 'EFBIG' });
      expect((error as AppendFailure).truncateError).toMatchObject({ code: 'EIO' });
      // The torn bytes stay: the caller must stop appending to this file until it is reopened.
      expect(file.bytes.length).toBe(12);
    });
  });
});

describe('decodeFrame', () => {
  describe('when the bytes hold a whole frame', () => {
    it('returns the record and the frame length', () => {
      expect(decodeFrame(frame, 0)).toEqual({
        record: { offset: 3, id: 'e', key: 'k', type: 't', body: '{"a":1}', appendedAt: 1 },
        length: frame.length,
      });
    });
  });

  describe('when the bytes end inside the frame', () => {
    it('returns incomplete', () => {
      expect(decodeFrame(frame.subarray(0, FRAME_HEADER_BYTES - 1), 0)).toBe('incomplete');
      expect(decodeFrame(frame.subarray(0, frame.length - 1), 0)).toBe('incomplete');
    });
  });

  describe('when the payload does not match its crc or is not a record', () => {
    it('returns corrupt', () => {
      const flipped = Buffer.from(frame);
      flipped[frame.length - 1] = (flipped[frame.length - 1] ?? 0) ^ 1;
      expect(decodeFrame(flipped, 0)).toBe('corrupt');
      expect(decodeFrame(Buffer.alloc(64), 0)).toBe('corrupt');
      const notARecord = encodeFrame({ offset: -1 } as never);
      expect(decodeFrame(notARecord, 0)).toBe('corrupt');
    });
  });
});
