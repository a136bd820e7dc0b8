/** What the RabbitMQ bench scripts share: the bench command and the server's CPU time on this machine. */

import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { z } from 'zod';
import { defineCommand, type PayloadOf } from '../src/index.js';

/** The bench's command: a payload of five fields, so the encoded envelope is about 300 bytes. */
export const PlaceOrder = defineCommand('bench.rabbitmq.PlaceOrder', {
  schema: z.object({
    orderId: z.string(),
    customerId: z.string(),
    sku: z.string(),
    quantity: z.number().int().positive(),
    currency: z.string().length(3),
    amount: z.number().int().positive(),
  }),
});

/** The payload of message `i`. */
export const payloadOf = (i: number): PayloadOf<typeof PlaceOrder> => ({
  orderId: `o-${String(i).padStart(9, '0')}`,
  customerId: `c-${String(i % 10_007).padStart(6, '0')}`,
  sku: `SKU-${String(i % 997).padStart(5, '0')}`,
  quantity: 1 + (i % 5),
  currency: 'EUR',
  amount: 1 + (i % 10),
});

/**
 * What Harrier's broker declared under `prefix` for the bench's endpoint and command (docs/rabbitmq.md):
 * the command type's queue, the endpoint's registry queue and the prefix's registry stream (where a
 * broker records registrations); its exchanges.
 */
export function harrierTopology(prefix: string): { queues: string[]; exchanges: string[] } {
  return {
    queues: [`${prefix}.cmd.${PlaceOrder.type}`, `${prefix}.registry.bench`, `${prefix}.registry`],
    exchanges: ['route', 'commands', 'events', 'delay', `cmd.${PlaceOrder.type}`].map(
      (e) => `${prefix}.${e}`,
    ),
  };
}

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ: 100 on Linux). */
const TICK_US = 1e6 / 100;

/** The port of the server at `rabbitMqUrl` when its host is this machine's loopback, else undefined. */
function loopbackPort(rabbitMqUrl: string): number | undefined {
  let url: URL;
  try {
    url = new URL(rabbitMqUrl);
  } catch {
    return undefined;
  }
  if (!['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname)) return undefined;
  return url.port === '' ? (url.protocol === 'amqps:' ? 5671 : 5672) : Number(url.port);
}

/**
 * The pid of the `beam.smp` (RabbitMQ's Erlang VM) listening on the URL's loopback port, found
 * through /proc (the listening socket's inode among its open files); undefined when the server is
 * not on this machine or /proc cannot tell. Other servers on this machine are left out.
 */
export function serverPid(rabbitMqUrl: string): number | undefined {
  const port = loopbackPort(rabbitMqUrl);
  if (port === undefined) return undefined;
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const fields = line.trim().split(/\s+/);
      const local = fields[1] ?? '';
      // State 0A is LISTEN; the local port is the hex after the colon.
      if (fields[3] === '0A' && parseInt(local.slice(local.indexOf(':') + 1), 16) === port) {
        inodes.add(`socket:[${fields[9] ?? ''}]`);
      }
    }
  }
  if (inodes.size === 0) return undefined;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, 'utf8').trim() !== 'beam.smp') continue;
      for (const fd of readdirSync(`/proc/${entry}/fd`)) {
        if (inodes.has(readlinkSync(`/proc/${entry}/fd/${fd}`))) return Number(entry);
      }
    } catch {
      // gone, or not ours to read
    }
  }
  return undefined;
}

/** CPU time (utime + stime) of process `pid` so far, µs; NaN without a pid or when /proc cannot tell. */
export function serverCpuUs(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces: the fields after its closing parenthesis are fixed.
    const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_US;
  } catch {
    return Number.NaN;
  }
}
