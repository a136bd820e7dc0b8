import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/** Debian's chromium (`apt-get install chromium`; .ci/run installs it where missing). */
export const CHROMIUM = '/usr/bin/chromium';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Launches the system's chromium headless; close it when done. */
export async function launchBrowser(): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does this)`);
  }
  return chromium.launch({ executablePath: CHROMIUM, args: FLAGS, headless: true });
}

/** True when screenshots under docs/images should be rewritten (UPDATE_SCREENSHOTS=1). */
export function updateScreenshots(): boolean {
  return process.env.UPDATE_SCREENSHOTS === '1';
}
