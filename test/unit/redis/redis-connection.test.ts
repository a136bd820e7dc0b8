import { Cluster, Redis } from 'ioredis';
import { describe, expect, it } from 'vitest';
import { describeConnection, isClusterConnection } from '../../../src/redis/redis-connection.js';

describe('describeConnection', () => {
  describe('when given a URL', () => {
    it('masks the password', () => {
      expect(describeConnection('redis://user:s3cret@10.0.0.1:6380/2')).toBe(
        'redis://user:***@10.0.0.1:6380/2',
      );
    });

    it('names a Unix socket by its path', () => {
      expect(describeConnection('/run/redis/redis.sock')).toBe('/run/redis/redis.sock');
    });
  });

  describe('when given seed nodes', () => {
    it('names the cluster by its nodes, masking passwords in node URLs', () => {
      expect(
        describeConnection({
          cluster: [{ host: '10.0.0.1', port: 7000 }, 'redis://:pw@10.0.0.2:7000', 7001],
        }),
      ).toBe('the Redis Cluster at 10.0.0.1:7000, redis://:***@10.0.0.2:7000, 127.0.0.1:7001');
    });
  });

  describe('when given ioredis options', () => {
    it('names host and port, never the password', () => {
      const described = describeConnection({ host: '10.0.0.3', port: 6390, password: 's3cret' });
      expect(described).toBe('10.0.0.3:6390');
    });
  });

  describe('when given a client', () => {
    it('names a Redis client by scheme, host and port, and a Cluster client before it connects', () => {
      const client = new Redis({ host: '10.0.0.4', port: 6391, password: 's3cret', lazyConnect: true });
      const cluster = new Cluster([{ host: '10.0.0.5', port: 7000 }], { lazyConnect: true });
      try {
        expect(describeConnection(client)).toBe('redis://10.0.0.4:6391');
        expect(describeConnection(cluster)).toBe('a Redis Cluster');
        expect(isClusterConnection(cluster)).toBe(true);
        expect(isClusterConnection(client)).toBe(false);
        expect(isClusterConnection({ cluster: [] })).toBe(true);
      } finally {
        client.disconnect();
        cluster.disconnect();
      }
    });
  });
});
