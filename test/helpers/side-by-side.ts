import { describe } from 'vitest';

/**
 * Registers `suites` so that they run at the same time as one another, each running its own tests
 * one after another as usual: for independent suites that mostly wait (on timers, on servers), which
 * would otherwise hold a test worker for the sum of their waits. Each suite gets a describe named by
 * its key.
 */
export function sideBySide(name: string, suites: Readonly<Record<string, () => void>>): void {
  describe.concurrent(name, () => {
    for (const [label, register] of Object.entries(suites)) {
      // A concurrent parent makes its tests concurrent too: the describe inside, not concurrent, keeps
      // this suite's tests in order, while the suite as a whole runs beside the others.
      describe(label, () => {
        describe('one test at a time', { concurrent: false }, register);
      });
    }
  });
}
