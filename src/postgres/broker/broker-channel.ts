import type { PostgresTables } from '../postgres-schema.js';

/**
 * The NOTIFY channel of a schema's broker, `harrier_broker_<schema>` (at most 63 bytes, as the
 * schema name is at most 48): a publish notifies it with each lane it wrote to, in its transaction,
 * so receivers wake as soon as the rows commit.
 */
export function brokerChannel(tables: PostgresTables): string {
  return `harrier_broker_${tables.schema}`;
}
