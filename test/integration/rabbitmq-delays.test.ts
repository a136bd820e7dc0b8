/**
 * RabbitMqBroker's delay queues: their type and names, what expires into no queue, and waits far
 * ahead (years, past any Date, a foreign message's absurd not-before header).
 */
import { describe, expect, it } from 'vitest';
import { HarrierError } from '../../src/errors/harrier-error.js';
import { deliveriesWithin, message, rabbitScene } from '../helpers/rabbitmq-scene.js';

const YEAR_MS = 365 * 86_400_000;
const { brokerWith, onChannel, readyIn } = rabbitScene();

/** The type of `queue`: declaring it classic is refused (406) when it is a quorum queue. */
function typeOf(queue: string, args: Record<string, unknown>): Promise<'quorum' | 'classic'> {
  return onChannel((channel) =>
    channel.assertQueue(queue, { durable: true, arguments: { ...args, 'x-queue-type': 'classic' } }),
  ).then(
    () => 'classic' as const,
    () => 'quorum' as const,
  );
}

const command = [{ handler: 'wake', kind: 'command' as const, types: ['delays.Wake'] }];

describe('RabbitMqBroker delay queues', () => {
  describe('with quorum queues (the default)', () => {
    it('waits in quorum delay queues <prefix>.delay.q<ms>, and declares <prefix>.unrouted beside them', async () => {
      const broker = brokerWith();
      try {
        await broker.register('delays', command);
        await broker.publish(message('command', 'delays.Wake', { deliverAt: Date.now() + 5_000 }));
        const p = broker.prefix;
        expect(await readyIn(`${p}.delay.q4096`)).toBe(1);
        expect(await readyIn(`${p}.delay.4096`)).toBe('missing');
        expect(await typeOf(`${p}.delay.q4096`, {})).toBe('quorum');
        expect(await readyIn(`${p}.unrouted`)).toBe(0);
      } finally {
        await broker.close();
      }
    });

    it('does not let messages that expire into no queue hold back the ones behind them', async () => {
      const broker = brokerWith();
      try {
        await broker.register('delays', command);
        // More than RabbitMQ's dead-letter worker takes at once (32): without <prefix>.unrouted
        // they would stay in the delay queue, retried, and the command behind them would wait.
        await broker.publishBatch(
          Array.from({ length: 40 }, () =>
            message('event', 'delays.NobodyListens', { deliverAt: Date.now() + 100 }),
          ),
        );
        const wake = message('command', 'delays.Wake', { deliverAt: Date.now() + 100 });
        await broker.publish(wake);
        const seen = await deliveriesWithin(broker, 'delays', 5_000, 1);
        expect(seen.map((delivery) => delivery.facts.messageId)).toEqual([wake.id]);
        expect(await readyIn(`${broker.prefix}.delay.q64`)).toBe(0);
      } finally {
        await broker.close();
      }
    });
  });

  describe("with queueType 'classic'", () => {
    it('waits in classic delay queues <prefix>.delay.<ms>, as earlier versions did', async () => {
      const broker = brokerWith({ queueType: 'classic' });
      try {
        await broker.register('delays', command);
        await broker.publish(message('command', 'delays.Wake', { deliverAt: Date.now() + 5_000 }));
        const p = broker.prefix;
        expect(await readyIn(`${p}.delay.4096`)).toBe(1);
        expect(await readyIn(`${p}.delay.q4096`)).toBe('missing');
        expect(await readyIn(`${p}.unrouted`)).toBe('missing');
      } finally {
        await broker.close();
      }
    });
  });

  describe('when a deliverAt is years ahead', () => {
    it('waits in the longest delay queue (2^31 ms), not delivered', async () => {
      const broker = brokerWith();
      try {
        await broker.register('delays', command);
        await broker.publish(message('command', 'delays.Wake', { deliverAt: Date.now() + 3 * YEAR_MS }));
        expect(await readyIn(`${broker.prefix}.delay.q2147483648`)).toBe(1);
        expect(await readyIn(`${broker.prefix}.cmd.delays.Wake`)).toBe(0);
      } finally {
        await broker.close();
      }
    });
  });

  describe('when a deliverAt is past any Date (or NaN)', () => {
    it.each([1e300, Number.NaN])(
      'refuses the batch with invalid-option, publishing nothing (%s)',
      async (deliverAt) => {
        const broker = brokerWith();
        try {
          await broker.register('delays', command);
          const refused = await broker
            .publishBatch([
              message('command', 'delays.Wake'),
              message('command', 'delays.Wake', { deliverAt }),
            ])
            .then(
              () => undefined,
              (error: unknown) => error,
            );
          expect(HarrierError.is(refused, 'invalid-option')).toBe(true);
          expect(await readyIn(`${broker.prefix}.cmd.delays.Wake`)).toBe(0);
        } finally {
          await broker.close();
        }
      },
    );
  });

  describe("when a foreign message's x-harrier-not-before is no time (1e300, NaN)", () => {
    it('delivers it at once rather than sending it round the delay queues for ever', async () => {
      const broker = brokerWith();
      try {
        await broker.register('delays', command);
        const queue = `${broker.prefix}.cmd.delays.Wake`;
        for (const notBefore of ['1e300', 'NaN']) {
          await onChannel(async (channel) => {
            channel.sendToQueue(queue, Buffer.from('{}'), {
              persistent: true,
              messageId: `foreign-${notBefore}`,
              headers: { 'x-harrier-not-before': notBefore },
            });
            await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': 'quorum' } });
          });
        }
        const seen = await deliveriesWithin(broker, 'delays', 5_000, 2);
        expect(seen.map((delivery) => delivery.facts.messageId).sort()).toEqual([
          'foreign-1e300',
          'foreign-NaN',
        ]);
      } finally {
        await broker.close();
      }
    });
  });
});
