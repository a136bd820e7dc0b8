import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExample, type Outcome } from '../helpers/run-example.js';

describe('examples/orders/traced-main.ts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'harrier-trace-'));
  const svg = join(dir, 'trace.svg');
  let outcome: Outcome;
  beforeAll(async () => {
    outcome = await runExample('examples/orders/traced-main.ts', { args: ['--svg', svg], timeoutMs: 40_000 });
  }, 45_000);
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it('exits with code 0 and prints one trace for the order', () => {
    expect(outcome.code, outcome.stdout + outcome.stderr).toBe(0);
    expect(outcome.stdout).toMatch(/Trace of order o-1002: \d+ spans in 1 trace\(s\)/);
  });

  it('shows each attempt of ChargePayment, the retries scheduled, and the third attempt handled', () => {
    expect(outcome.stdout).toMatch(
      /CONSUMER\s+process orders\.OrderPlaced \[ChargePayment\] #1\s+-- error Error, harrier\.retry_scheduled/,
    );
    expect(outcome.stdout).toMatch(
      /CONSUMER\s+process orders\.OrderPlaced \[ChargePayment\] #2\s+-- error Error, harrier\.retry_scheduled/,
    );
    expect(outcome.stdout).toMatch(/CONSUMER\s+process orders\.OrderPlaced \[ChargePayment\] #3$/m);
  });

  it('shows NotifyLegacyCrm dead-lettered on its third attempt', () => {
    expect(outcome.stdout).toMatch(
      /process orders\.OrderPlaced \[NotifyLegacyCrm\] #3\s+-- error Error, harrier\.dead_lettered \(handler-failed\)/,
    );
  });

  it("nests the saga's steps and the commands they send under the events that caused them", () => {
    expect(outcome.stdout).toMatch(
      /\n.*CONSUMER {12}process orders\.PaymentCharged \[orders\.Fulfilment\] #1\n.*PRODUCER {14}create orders\.ShipOrder\n.*CONSUMER {16}process orders\.ShipOrder \[ShipOrderHandler\] #1/,
    );
  });

  it('writes the waterfall as an SVG', () => {
    const text = readFileSync(svg, 'utf8');
    expect(text.startsWith('<svg')).toBe(true);
    expect(text).toContain('[NotifyLegacyCrm] #3');
  });
});
