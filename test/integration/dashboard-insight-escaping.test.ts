import { afterEach, describe, expect, it } from 'vitest';
import type {
  DashboardOptions,
  DashboardProjectionLag,
  DashboardTopology,
} from '../../src/dashboard/index.js';
import { InMemoryDeadLetterStore } from '../../src/dead-letters/in-memory-dead-letter-store.js';
import { serveDashboard, type ServedDashboard } from '../helpers/dashboard.js';

let served: ServedDashboard | undefined;
afterEach(async () => {
  await served?.close();
  served = undefined;
});

async function get(options: Partial<DashboardOptions>, path: string): Promise<string> {
  served = await serveDashboard({ deadLetters: new InMemoryDeadLetterStore(), ...options });
  return (await fetch(`${served.url}${path}`)).text();
}

// A source is any function an app passes (`createDashboard` is public API, callable from JS or with
// values read from JSON/Redis as strings); the docs promise "Every value is escaped".
const evil = '<img src=x onerror=alert(1)>' as unknown as number;

describe('createDashboard: numbers from a source on the insight pages', () => {
  it('escapes partition, checkpoint, offsets and lag on the projections page', async () => {
    const lags = [
      { projection: 'p', topic: 't', partition: evil, checkpoint: evil, endOffset: evil, lag: evil },
    ] as DashboardProjectionLag[];
    const text = await get({ projections: () => Promise.resolve(lags) }, '/projections');
    expect(text).not.toContain('<img');
  });

  it('escapes queue depths on the topology page', async () => {
    const c = { wait: evil, active: 0, delayed: 0, failed: 0 };
    const topology: DashboardTopology = {
      endpoints: [
        {
          endpoint: 'e',
          subscriptions: [
            {
              subscription: { handler: 'h', kind: 'command', types: ['t'] },
              queues: [{ name: 'q', ...c }],
              total: c,
            },
          ],
        },
      ],
    };
    const text = await get({ topology: () => Promise.resolve(topology) }, '/topology');
    expect(text).not.toContain('<img');
  });
});
