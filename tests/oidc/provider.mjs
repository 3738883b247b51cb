#!/usr/bin/env node
// A real OpenID Connect provider (the certified `oidc-provider` package) for QingLong's sign-in
// tests. Listens on 127.0.0.1 only, keeps everything in memory and knows three static accounts.
//
//   node tests/oidc/provider.mjs --port 0 --client-id ql --client-secret s3cret \
//       --redirect-uri http://127.0.0.1:5700/api/v1/auth/oidc/callback [--signing-alg RS256]
//
// It always listens on 127.0.0.1; `--issuer-host localhost` names it http://localhost:PORT, a
// different site from 127.0.0.1 for a browser (cookies, SameSite), as a real provider would be.
// Prints `READY ISSUER` (http://127.0.0.1:PORT) on stdout once it listens, one line per
// request on stderr, and exits 0 on SIGTERM or SIGINT. See README.md beside this file for the
// interaction pages' forms.

import { createServer } from 'node:http';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const ACCOUNTS = {
  alice: {
    sub: 'alice-sub-1',
    email: 'alice@example.com',
    email_verified: true,
    preferred_username: 'alice',
    name: 'Alice',
    groups: ['ops'],
  },
  bob: {
    sub: 'bob-sub-2',
    email: 'bob@example.com',
    email_verified: true,
    preferred_username: 'bob',
    name: 'Bob',
    groups: ['admins', 'ops'],
  },
  mallory: {
    sub: 'mallory-sub-3',
    email: 'mallory@example.com',
    email_verified: true,
    preferred_username: 'mallory',
    name: 'Mallory',
    groups: [],
  },
};

const SIGNING_ALGS = {
  RS256: () => generateKeyPairSync('rsa', { modulusLength: 2048 }),
  PS256: () => generateKeyPairSync('rsa', { modulusLength: 2048 }),
  ES256: () => generateKeyPairSync('ec', { namedCurve: 'P-256' }),
  EdDSA: () => generateKeyPairSync('ed25519'),
};

function usage(message) {
  process.stderr.write(`provider.mjs: ${message}\n`
    + 'usage: provider.mjs [--port N] [--client-id ID] [--client-secret SECRET]\n'
    + '       [--redirect-uri URI]... [--post-logout-redirect-uri URI]...\n'
    + `       [--signing-alg ${Object.keys(SIGNING_ALGS).join('|')}] [--issuer-host 127.0.0.1|localhost]\n`);
  process.exit(2);
}

function options() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        port: { type: 'string', default: '0' },
        'client-id': { type: 'string', default: 'qinglong' },
        'client-secret': { type: 'string', default: 'qinglong-test-secret' },
        'redirect-uri': { type: 'string', multiple: true },
        'post-logout-redirect-uri': { type: 'string', multiple: true },
        'signing-alg': { type: 'string', default: 'RS256' },
        'issuer-host': { type: 'string', default: '127.0.0.1' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    usage(err.message);
  }
  if (parsed.help) usage('help');
  const port = Number(parsed.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) usage(`bad --port ${parsed.port}`);
  if (!SIGNING_ALGS[parsed['signing-alg']]) usage(`unsupported --signing-alg ${parsed['signing-alg']}`);
  if (!['127.0.0.1', 'localhost'].includes(parsed['issuer-host'])) usage('--issuer-host is 127.0.0.1 or localhost');
  // Each of --redirect-uri and --post-logout-redirect-uri may be repeated or hold a comma list.
  const list = (values) => (values || []).flatMap((v) => v.split(',')).map((v) => v.trim()).filter(Boolean);
  const redirectUris = list(parsed['redirect-uri']);
  if (redirectUris.length === 0) redirectUris.push('http://127.0.0.1/callback');
  return {
    port,
    clientId: parsed['client-id'],
    clientSecret: parsed['client-secret'],
    redirectUris,
    postLogoutRedirectUris: list(parsed['post-logout-redirect-uri']),
    alg: parsed['signing-alg'],
    issuerHost: parsed['issuer-host'],
  };
}

function signingJwk(alg) {
  const { privateKey } = SIGNING_ALGS[alg]();
  const jwk = privateKey.export({ format: 'jwk' });
  return { ...jwk, alg, use: 'sig', kid: `test-${alg.toLowerCase()}-${randomBytes(6).toString('hex')}` };
}

const escapeHtml = (value) => String(value).replace(/[&<>"']/g, (c) => ({
  '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
}[c]));

// Pages without any external resource (the package's own pages import a web font).
function page(title, body) {
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>body{font-family:sans-serif;max-width:24rem;margin:2rem auto}input,button{display:block;width:100%;margin:.4rem 0;padding:.4rem;box-sizing:border-box}.error{color:#b00}</style>
</head>
<body>
<h1>${escapeHtml(title)}</h1>
${body}
</body>
</html>
`;
}

function loginPage(uid, params, error) {
  const hint = params.login_hint ? ` value="${escapeHtml(params.login_hint)}"` : '';
  return page('Sign-in', `${error ? `<p class="error" id="login-error">${escapeHtml(error)}</p>\n` : ''}<form id="login-form" autocomplete="off" action="/interaction/${escapeHtml(uid)}" method="post">
<input type="hidden" name="prompt" value="login">
<input required type="text" id="login" name="login" placeholder="account (alice, bob, mallory)" autofocus${hint}>
<input required type="password" id="password" name="password" placeholder="password (any)">
<button type="submit" id="login-submit" class="login login-submit">Sign-in</button>
</form>
<p><a id="abort" href="/interaction/${escapeHtml(uid)}/abort">Cancel</a></p>`);
}

function consentPage(uid, client, details) {
  const scopes = (details.missingOIDCScope || []).filter((s) => s !== 'openid');
  const claims = (details.missingOIDCClaims || [])
    .filter((c) => !['sub', 'sid', 'auth_time', 'acr', 'amr', 'iss'].includes(c));
  return page('Authorize', `<p>Client <strong id="client-id">${escapeHtml(client.clientId)}</strong> asks for:</p>
<ul id="scopes">${scopes.map((s) => `<li>${escapeHtml(s)}</li>`).join('')}</ul>
${claims.length ? `<ul id="claims">${claims.map((c) => `<li>${escapeHtml(c)}</li>`).join('')}</ul>` : ''}
<form id="consent-form" autocomplete="off" action="/interaction/${escapeHtml(uid)}" method="post">
<input type="hidden" name="prompt" value="consent">
<button type="submit" id="consent-submit" class="login login-submit" autofocus>Continue</button>
</form>
<p><a id="abort" href="/interaction/${escapeHtml(uid)}/abort">Cancel</a></p>`);
}

async function readForm(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 64 * 1024) throw new Error('form too large');
    chunks.push(chunk);
  }
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function send(res, status, html) {
  res.writeHead(status, {
    'content-type': 'text/html; charset=utf-8',
    'cache-control': 'no-store',
  });
  res.end(html);
}

// The interaction pages: GET /interaction/:uid, POST /interaction/:uid, GET /interaction/:uid/abort.
async function interaction(provider, req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) {
    send(res, 400, page('Error', '<p class="error">interaction mismatch</p>'));
    return;
  }
  const { prompt, params } = details;

  if (action === 'abort') {
    await provider.interactionFinished(req, res, {
      error: 'access_denied',
      error_description: 'End-User aborted interaction',
    }, { mergeWithLastSubmission: false });
    return;
  }

  if (req.method === 'GET') {
    if (prompt.name === 'login') {
      send(res, 200, loginPage(uid, params));
    } else if (prompt.name === 'consent') {
      const client = await provider.Client.find(params.client_id);
      send(res, 200, consentPage(uid, client, prompt.details));
    } else {
      send(res, 501, page('Error', `<p class="error">prompt ${escapeHtml(prompt.name)} not implemented</p>`));
    }
    return;
  }

  const form = await readForm(req);
  const submitted = form.get('prompt');
  if (submitted === 'login' && prompt.name === 'login') {
    const login = (form.get('login') || '').trim();
    if (!Object.hasOwn(ACCOUNTS, login)) {
      // Unknown accounts never sign in: the same form again, with an error.
      send(res, 200, loginPage(uid, params, 'Unknown account.'));
      return;
    }
    await provider.interactionFinished(req, res, {
      login: { accountId: login, amr: ['pwd'] },
    }, { mergeWithLastSubmission: false });
    return;
  }
  if (submitted === 'consent' && prompt.name === 'consent') {
    const { details: missing } = prompt;
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: params.client_id });
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    if (missing.missingResourceScopes) {
      for (const [indicator, scope] of Object.entries(missing.missingResourceScopes)) {
        grant.addResourceScope(indicator, scope.join(' '));
      }
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  send(res, 400, page('Error', `<p class="error">unexpected submission for prompt ${escapeHtml(prompt.name)}</p>`));
}

function errorPage(ctx, out) {
  ctx.type = 'html';
  ctx.body = page('Error', Object.entries(out)
    .map(([key, value]) => `<p class="error"><strong>${escapeHtml(key)}</strong>: <span id="${escapeHtml(key)}">${escapeHtml(value)}</span></p>`)
    .join('\n'));
}

function configuration(opts) {
  return {
    clients: [{
      client_id: opts.clientId,
      client_secret: opts.clientSecret,
      redirect_uris: opts.redirectUris,
      post_logout_redirect_uris: opts.postLogoutRedirectUris,
      response_types: ['code'],
      grant_types: ['authorization_code'],
      // A client registered for client_secret_basic may also use client_secret_post: the
      // provider accepts either of the two secret methods for a client registered with one.
      token_endpoint_auth_method: 'client_secret_basic',
      id_token_signed_response_alg: opts.alg,
    }],
    jwks: { keys: [signingJwk(opts.alg)] },
    cookies: {
      keys: [randomBytes(32).toString('base64url')],
      // Plain HTTP on loopback: a SameSite=None cookie without Secure is dropped by browsers.
      long: { httpOnly: true, sameSite: 'lax', signed: true },
      short: { httpOnly: true, sameSite: 'lax', signed: true },
    },
    async findAccount(ctx, id) {
      if (!Object.hasOwn(ACCOUNTS, id)) return undefined;
      const account = ACCOUNTS[id];
      return {
        accountId: id,
        async claims() {
          return { ...account, groups: [...account.groups] };
        },
      };
    },
    scopes: ['openid', 'email', 'profile', 'groups'],
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username', 'name'],
      groups: ['groups'],
    },
    // Release the requested scopes' claims in the ID token itself, not only from userinfo.
    conformIdTokenClaims: false,
    responseTypes: ['code'],
    pkce: { methods: ['S256'], required: () => true },
    clientAuthMethods: ['client_secret_basic', 'client_secret_post'],
    features: {
      devInteractions: { enabled: false },
      userinfo: { enabled: true },
      revocation: { enabled: true },
      rpInitiatedLogout: {
        enabled: true,
        async logoutSource(ctx, form) {
          ctx.body = page('Sign out', `${form}
<button type="submit" id="logout-yes" form="op.logoutForm" value="yes" name="logout">Yes, sign me out</button>
<button type="submit" id="logout-no" form="op.logoutForm">No, stay signed in</button>`);
        },
        async postLogoutSuccessSource(ctx) {
          ctx.body = page('Signed out', '<p id="signed-out">You are signed out.</p>');
        },
      },
    },
    interactions: {
      url(ctx, interactionInfo) {
        return `/interaction/${interactionInfo.uid}`;
      },
    },
    renderError: errorPage,
    ttl: {
      AccessToken: 3600,
      AuthorizationCode: 60,
      IdToken: 3600,
      Interaction: 600,
      Session: 3600,
      Grant: 3600,
    },
  };
}

async function main() {
  const opts = options();
  const server = createServer();
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, '127.0.0.1', resolve);
  });
  const { port } = server.address();
  const issuer = `http://${opts.issuerHost}:${port}`;

  const provider = new Provider(issuer, configuration(opts));
  provider.on('server_error', (ctx, err) => process.stderr.write(`server_error: ${err.stack || err}\n`));
  const callback = provider.callback();

  server.on('request', (req, res) => {
    const started = Date.now();
    res.on('finish', () => {
      process.stderr.write(`${req.method} ${req.url.split('?')[0]} ${res.statusCode} ${Date.now() - started}ms\n`);
    });
    const path = req.url.split('?')[0];
    const m = /^\/interaction\/([A-Za-z0-9_-]+)(\/abort)?$/.exec(path);
    if (m && (req.method === 'GET' || (req.method === 'POST' && !m[2]))) {
      interaction(provider, req, res, m[1], m[2] ? 'abort' : 'page').catch((err) => {
        process.stderr.write(`interaction error: ${err.message}\n`);
        if (!res.headersSent) send(res, 400, page('Error', `<p class="error" id="error">${escapeHtml(err.message)}</p>`));
        else res.end();
      });
      return;
    }
    callback(req, res);
  });

  const stop = () => {
    server.close(() => process.exit(0));
    if (server.closeAllConnections) server.closeAllConnections();
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);

  process.stdout.write(`READY ${issuer}\n`);
}

main().catch((err) => {
  process.stderr.write(`provider.mjs: ${err.stack || err}\n`);
  process.exit(1);
});
