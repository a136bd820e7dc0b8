/**
 * The dispatcher's settle retries against an ack that does real I/O: a TCP round trip to a server
 * of the test's own, which answers late or drops the connection, before the ack applies.
 */
import { createServer, Socket, type Server } from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CommandHandler,
  InMemoryBroker,
  createBus,
  type LogFields,
  type Logger,
  type MessageBus,
} from '../../src/index.js';
import { SETTLED } from '../../src/extend.js';
import { ReserveStock } from '../unit/bus/fixtures.js';

/** What the ack server does with each request, in turn: answer after `ms`, or drop the connection. */
type Reply = { readonly answerAfterMs: number } | 'drop';

/** A TCP server that answers each line with "OK\n" as `replies` say (the last one repeats). */
async function ackServer(replies: readonly Reply[]): Promise<{ port: number; server: Server }> {
  let served = 0;
  const server = createServer((socket) => {
    socket.once('data', () => {
      const reply = replies[Math.min(served++, replies.length - 1)] ?? { answerAfterMs: 0 };
      if (reply === 'drop') {
        socket.destroy();
        return;
      }
      setTimeout(() => socket.end('OK\n'), reply.answerAfterMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return { port: typeof address === 'object' && address !== null ? address.port : 0, server };
}

/** An in-memory broker whose ack first asks a remote server, as a networked broker's would. */
class RemoteAckBroker extends InMemoryBroker {
  ackCalls = 0;
  constructor(private readonly port: number) {
    super();
  }
  override ack(id: string): Promise<void> {
    this.ackCalls++;
    return new Promise<void>((resolve, reject) => {
      const socket = new Socket();
      socket.once('error', reject);
      socket.once('close', (hadError) => {
        if (!hadError && !answered)
          reject(new Error('read ECONNRESET: the ack server closed the connection'));
      });
      let answered = false;
      socket.once('data', () => {
        answered = true;
        socket.destroy();
        super.ack(id).then(resolve, reject);
      });
      socket.connect(this.port, '127.0.0.1', () => socket.write(`ack ${id}\n`));
    });
  }
}

function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const record = (message: string, _fields?: LogFields): void => void lines.push(message);
  return { debug: record, info: record, warn: record, error: record, lines };
}

const servers: Server[] = [];
let bus: MessageBus | undefined;
afterEach(async () => {
  await bus?.stop({ gracePeriodMs: 100 });
  bus = undefined;
  for (const server of servers.splice(0)) server.close();
});

async function run(replies: readonly Reply[]) {
  const { port, server } = await ackServer(replies);
  servers.push(server);
  const handled: string[] = [];
  @CommandHandler(ReserveStock)
  class Handler {
    handle(payload: { orderId: string }): void {
      handled.push(payload.orderId);
    }
  }
  const broker = new RemoteAckBroker(port);
  const logger = recordingLogger();
  bus = createBus({ broker, handlers: [Handler], logger, settleTimeoutMs: 100 });
  await bus.start();
  await bus.send(ReserveStock, { orderId: 'o-1' });
  await vi.waitFor(
    () => {
      expect(handled).toEqual(['o-1']);
      expect(broker.stats()).toMatchObject({ inFlight: 0, ready: 0 });
    },
    { timeout: 5_000 },
  );
  return { broker, handled, logger };
}

describe('Dispatcher', () => {
  describe('when the broker returns SETTLED', () => {
    it('is the in-memory broker answering an ack it has applied', async () => {
      const broker = new InMemoryBroker();
      await broker.register('e', [{ handler: 'H', kind: 'command', types: [ReserveStock.type] }]);
      await broker.publish({ id: 'm-1', kind: 'command', type: ReserveStock.type, body: '{}' });
      const iterator = broker.receiver({ endpoint: 'e' })[Symbol.asyncIterator]();
      const delivery = await iterator.next();
      expect(delivery.done).toBe(false);
      expect(broker.ack(delivery.done === true ? '' : delivery.value.id)).toBe(SETTLED);
      await iterator.return?.();
      await broker.close();
    });
  });

  describe('when an ack does I/O and answers after the settle time-out', () => {
    it('tries the ack again, handles the message once, and leaves nothing in flight', async () => {
      const { broker, handled, logger } = await run([{ answerAfterMs: 300 }, { answerAfterMs: 0 }]);
      expect(broker.ackCalls).toBeGreaterThanOrEqual(2);
      expect(handled).toEqual(['o-1']);
      expect(logger.lines).toContain('ack failed; retrying');
    });
  });

  describe('when an ack does I/O and its connection drops', () => {
    it('tries the ack again until it applies, and handles the message once', async () => {
      const { broker, handled, logger } = await run(['drop', 'drop', { answerAfterMs: 0 }]);
      expect(broker.ackCalls).toBe(3);
      expect(handled).toEqual(['o-1']);
      expect(logger.lines.filter((line) => line === 'ack failed; retrying')).toHaveLength(2);
    });
  });
});
