/**
 * RabbitMqBroker through a RabbitMQ killed with SIGKILL and started again (DESIGN.md guarantees 1
 * and 11), as a crashed host: the same scene and guarantees as rabbitmq-restart.test.ts. Quorum
 * queues keep every confirmed message across the kill, so no acknowledged publish is lost.
 * The topology is declared and the server restarted gracefully once before the load: RabbitMQ 3.10
 * saves a new quorum queue's registration lazily, and one killed moments after its declaration comes
 * back broken (test/helpers/local-rabbitmq.ts).
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
  describe('when RabbitMQ is killed with SIGKILL and started again while messages flow', () => {
    let scene: OutageScene | undefined;
    let outcome: OutageOutcome | undefined;

    beforeAll(async () => {
      scene = await startOutageScene(faults, redisUrl, { settleTopology: true });
      const running = scene;
      const { downMs, upAt } = await runThroughOutage(running, () => running.server.kill());
      outcome = await outageOutcome(running);
      console.info(
        `[rabbitmq-restart-kill] killed for ${downMs} ms, all handled ${Date.now() - upAt} ms after it was back: ${outcome.summary}`,
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
