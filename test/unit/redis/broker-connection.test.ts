import { createRequire } from 'node:module';
import { dirname } from 'node:path';
import { Cluster } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { createBrokerClient } from '../../../src/redis/broker-connection.js';

const require = createRequire(import.meta.url);

/**
 * A second copy of ioredis, as an application that installs its own next to bullmq's has: loaded
 * afresh, so its classes are not the ones src/redis imports.
 */
function anotherIoRedis(): typeof import('ioredis') {
  const root = dirname(require.resolve('ioredis/package.json'));
  const cached = Object.entries(require.cache).filter(([file]) => file.startsWith(root));
  for (const [file] of cached) Reflect.deleteProperty(require.cache, file);
  try {
    return require('ioredis') as typeof import('ioredis');
  } finally {
    for (const [file, module] of cached) require.cache[file] = module;
  }
}

describe('createBrokerClient', () => {
  describe('when given a Cluster client of another copy of ioredis', () => {
    it("duplicates it as a cluster with the broker's settings", () => {
      const other = anotherIoRedis();
      const app = new other.Cluster([{ host: '127.0.0.1', port: 7000 }], { lazyConnect: true });
      expect(app).not.toBeInstanceOf(Cluster);
      const client = createBrokerClient(
        app,
        'orders',
        { maxRetriesPerRequest: null, enableOfflineQueue: false, lazyConnect: true },
        'producer',
      ) as Cluster;
      try {
        expect(client.isCluster).toBe(true);
        expect(client.options.enableOfflineQueue).toBe(false);
        expect(client.options.redisOptions).toMatchObject({
          connectionName: 'orders:harrier:producer',
          maxRetriesPerRequest: null,
        });
      } finally {
        client.disconnect();
        app.disconnect();
      }
    });
  });
});
