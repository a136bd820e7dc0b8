/**
 * pg, the PostgreSQL layer's driver: every module of src/postgres takes its values (`pg.Pool`) from
 * here, and its types from `import type`.
 *
 * @remarks
 * pg is an optional peer, required (its CommonJS build) when this module is evaluated: synchronously,
 * so `harrier/postgres` loads under `import` and under `require(esm)` alike, and a missing pg fails
 * the load with HarrierError `missing-dependency` saying `npm install pg` instead of Node's
 * ERR_MODULE_NOT_FOUND. pg's ESM entry re-exports this same CommonJS build, so an app's own
 * `pg.Pool` is the class Harrier uses.
 */
import { createRequire } from 'node:module';
import type * as Pg from 'pg';
import { requirePeers } from '../errors/require-peers.js';

const [pgModule] = requirePeers(
  createRequire(import.meta.url),
  ['pg'],
  "Harrier's PostgreSQL layer (harrier/postgres and `harrier postgres` commands)",
);

/** The pg module. */
export const pg = pgModule as typeof Pg;
