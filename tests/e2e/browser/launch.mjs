// Headless Debian Chromium for the UI scripts, loopback only: every host but 127.0.0.1 resolves to
// nothing (the Prefect UI fetches an analytics host even with analytics off).
import { chromium } from './node_modules/playwright-core/index.mjs';

export function launch() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--disable-default-apps',
           '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1'],
  });
}
