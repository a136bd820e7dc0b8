/**
 * RabbitMqBroker through a RabbitMQ restart (DESIGN.md guarantees 1 and 11): the server is stopped
 * gracefully and started again while two worker processes handle and the test publishes. An outage
 * is not a message failure: the workers reconnect by themselves and consume again, no process
 * crashes, nothing is dead-lettered, no attempt is spent, every acknowledged publish is handled,
 * and a publish made while the server is away is refused with `rabbitmq-unavailable`.
 * The SIGKILL of the server is rabbitmq-restart-kill.test.ts, a file of its own so the two run at once.
 */
import { beforeAll, describe, inject } from 'vitest';
import { useRabbitFaultTests } from './fixtures/rabbitmq-harness.js';
import {
  describeOutageGuarantees,
  outageOutcome,
  runThroughOutage,
  startOutageScene,
  type OutageOutcome,
  type OutageScene,
} from './fixtures/rabbitmq-outage.js';

const redisUrl = inject('redisUrl');
const faults = useRabbitFaultTests({ scope: 'file' });

describe('RabbitMqBroker outages', () => {
  describe('when RabbitMQ is stopped gracefully and started again while messages flow', () => {
    let scene: OutageScene | undefined;
    let outcome: OutageOutcome | undefined;

    beforeAll(async () => {
      scene = await startOutageScene(faults, redisUrl);
      const running = scene;
      const { downMs, upAt } = await runThroughOutage(running, () => running.server.stop());
      outcome = await outageOutcome(running);
      console.info(
        `[rabbitmq-restart] stopped for ${downMs} ms, all handled ${Date.now() - upAt} ms after it was back: ${outcome.summary}`,
      );
    }, 60_000);

    describeOutageGuarantees(
      () => {
        if (outcome === undefined) throw new Error('The outage scene did not run: see the beforeAll error');
        return outcome;
      },
      () => scene?.workers.map((w) => w.output().slice(-3_000)).join('\n---\n') ?? '',
    );
  });
});
