// Braid's DASH player page (issue 21, seed 001 chapter 8): loads dash.js or
// Shaka Player, plays one manifest, and keeps a playback log for the lab's
// WebDriver client (`return window.braidPlayback.log()`).
//
// Query parameters:
//   mpd       manifest URL (relative to the page or absolute; default manifest.mpd)
//   player    dashjs | shaka
//   abr       dash.js: throughput (throughput rule only), bola (BOLA only),
//             dynamic or default (dash.js's default: both rules);
//             Shaka: default (its own estimator; any other value is an error)
//   buffer    buffer target in seconds (dash.js bufferTimeDefault and its
//             top-quality targets; Shaka streaming.bufferingGoal)
//   duration  stop (pause) after this many seconds of media; default: the end
//
// The log's model (what the lab's QoE metrics are computed from):
// - startup_s: wall seconds from page script start to the first `playing`;
// - a stall starts at a `waiting` event after startup (or when the playhead
//   has not moved for STALL_POLL_S while playing, for a player that does
//   not fire it) and ends when the playhead advances again; its duration is
//   wall time, so it measures what a viewer sees;
// - played: media seconds actually played, attributed to the video
//   representation being rendered (dash.js QUALITY_CHANGE_RENDERED, Shaka
//   mediaqualitychanged), merged while the bitrate stays the same;
//   start_s is the media time where the stretch begins (the shape of
//   braid_dash::qoe::Played); quality holds the changes in wall time;
// - buffer: seconds buffered ahead of the playhead, sampled every 0.5 s;
// - errors: every player or media error; `fatal` ones fail the experiment.
'use strict';

(function () {
  const t0 = performance.now();
  const now = () => (performance.now() - t0) / 1000;
  const q = new URLSearchParams(location.search);
  const cfg = {
    mpd: q.get('mpd') || 'manifest.mpd',
    player: q.get('player') || 'dashjs',
    abr: q.get('abr') || 'default',
    buffer: Number(q.get('buffer') || '30'),
    duration: q.has('duration') ? Number(q.get('duration')) : null,
  };
  // How often the playhead is polled, and how long it may stand still
  // while playing before that counts as a stall without a `waiting` event.
  const POLL_S = 0.1;
  const STALL_POLL_S = 0.5;
  const BUFFER_SAMPLE_S = 0.5;

  const log = {
    player: cfg.player,
    abr: cfg.abr,
    buffer_target_s: cfg.buffer,
    versions: {},
    startup_s: null,
    stalls: [],
    played: [],
    quality: [],
    buffer: [],
    errors: [],
    events: {},
    ended: false,
    finished: false,
    media_s: 0,
    now_s: 0,
  };
  const video = document.getElementById('video');
  let started = false;
  let stall = null; // {start_s, at_media_s}
  let lastMedia = 0;
  let lastMove = 0;
  let kbps = null;
  let player = null;

  function error(message, fatal) {
    log.errors.push({ t_s: now(), message: String(message), fatal: !!fatal });
    if (fatal) finish();
  }

  function finish() {
    if (log.finished) return;
    endStall();
    log.finished = true;
    log.now_s = now();
    try { video.pause(); } catch (e) { /* nothing to pause */ }
  }

  function startStall(at) {
    if (!started || stall || log.finished) return;
    stall = { start_s: at, at_media_s: video.currentTime };
  }

  function endStall() {
    if (!stall) return;
    log.stalls.push({ start_s: stall.start_s, duration_s: now() - stall.start_s });
    stall = null;
  }

  function setKbps(value, source) {
    if (!(value > 0)) return;
    const k = value / 1000;
    if (k !== kbps) log.quality.push({ t_s: now(), kbps: k, source: source });
    kbps = k;
  }

  // The rendered video bitrate when no event said it yet.
  function currentKbps() {
    if (kbps !== null || !player) return kbps;
    try {
      if (cfg.player === 'dashjs') {
        const r = player.getCurrentRepresentationForType('video');
        if (r && r.bandwidth) setKbps(r.bandwidth, 'query');
      } else {
        const t = player.getVariantTracks().find(v => v.active);
        if (t) setKbps(t.videoBandwidth || t.bandwidth, 'query');
      }
    } catch (e) { /* not known yet */ }
    return kbps;
  }

  function poll() {
    const t = now();
    const media = video.currentTime;
    const moved = media - lastMedia;
    if (moved > 0) {
      if (started && moved < 5) {
        const k = currentKbps();
        const last = log.played[log.played.length - 1];
        if (last && last.kbps === k) last.duration_s += moved;
        else log.played.push({ start_s: lastMedia, duration_s: moved, kbps: k });
      }
      lastMedia = media;
      lastMove = t;
      if (stall && media > stall.at_media_s + 0.01) endStall();
    } else if (started && !video.paused && !video.ended && !log.finished && t - lastMove > STALL_POLL_S) {
      startStall(lastMove);
    }
    log.media_s = media;
    log.now_s = t;
    if (cfg.duration !== null && media >= cfg.duration) finish();
  }

  // Seconds buffered ahead of the playhead (audio and video both).
  function bufferLevel() {
    const b = video.buffered;
    const at = video.currentTime;
    let level = 0;
    for (let i = 0; i < b.length; i++) {
      if (b.start(i) <= at + 0.1 && b.end(i) > at) level = b.end(i) - at;
    }
    return level;
  }

  function sampleBuffer() {
    log.buffer.push({ t_s: now(), level_s: bufferLevel() });
  }

  for (const name of ['playing', 'waiting', 'stalled', 'ended', 'pause', 'seeking', 'canplay', 'loadedmetadata']) {
    video.addEventListener(name, () => { log.events[name] = (log.events[name] || 0) + 1; });
  }
  video.addEventListener('playing', () => {
    if (!started) {
      started = true;
      log.startup_s = now();
      lastMedia = video.currentTime;
      lastMove = now();
    }
  });
  video.addEventListener('waiting', () => startStall(now()));
  video.addEventListener('ended', () => { log.ended = true; finish(); });
  video.addEventListener('error', () => {
    const e = video.error;
    error('media element: ' + (e ? `code ${e.code}: ${e.message}` : 'unknown'), true);
  });
  window.addEventListener('error', e => error('page: ' + e.message, true));
  window.addEventListener('unhandledrejection', e => error('page: ' + (e.reason && e.reason.message || e.reason), true));

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const s = document.createElement('script');
      s.src = src;
      s.onload = resolve;
      s.onerror = () => reject(new Error(`cannot load ${src} (run \`npm ci --prefix players\`)`));
      document.head.appendChild(s);
    });
  }

  async function startDashjs() {
    await loadScript('vendor/dash.all.min.js');
    const rules = { throughput: [true, false], bola: [false, true], dynamic: [true, true], default: [true, true] }[cfg.abr];
    if (!rules) throw new Error(`abr=${cfg.abr}: dash.js takes throughput, bola, dynamic or default`);
    log.versions.dashjs = dashjs.Version || (dashjs.MediaPlayer().create().getVersion());
    player = dashjs.MediaPlayer().create();
    player.updateSettings({
      debug: { logLevel: dashjs.Debug.LOG_LEVEL_WARNING },
      streaming: {
        buffer: {
          bufferTimeDefault: cfg.buffer,
          bufferTimeAtTopQuality: cfg.buffer,
          bufferTimeAtTopQualityLongForm: cfg.buffer,
        },
        abr: { rules: { throughputRule: { active: rules[0] }, bolaRule: { active: rules[1] } } },
      },
    });
    const E = dashjs.MediaPlayer.events;
    player.on(E.QUALITY_CHANGE_RENDERED, e => {
      if (e.mediaType === 'video' && e.newRepresentation) setKbps(e.newRepresentation.bandwidth, 'rendered');
    });
    player.on(E.ERROR, e => {
      const err = e.error || {};
      error(`dash.js error ${err.code !== undefined ? err.code : ''}: ${err.message || JSON.stringify(e)}`, true);
    });
    player.on(E.PLAYBACK_ERROR, e => error('dash.js playback error: ' + (e.error && e.error.message || ''), true));
    player.initialize(video, cfg.mpd, true);
  }

  async function startShaka() {
    await loadScript('vendor/shaka-player.dash.js');
    if (cfg.abr !== 'default') throw new Error(`abr=${cfg.abr}: Shaka Player takes default only`);
    shaka.polyfill.installAll();
    if (!shaka.Player.isBrowserSupported()) throw new Error('Shaka Player: this browser is not supported');
    log.versions.shaka = shaka.Player.version;
    player = new shaka.Player();
    await player.attach(video);
    // Retries: a link that goes away for a while (the stall test cuts it)
    // must not end the stream; a request that cannot succeed (404) fails
    // after the retries with a critical error.
    const retry = { maxAttempts: 4, baseDelay: 500, backoffFactor: 2, fuzzFactor: 0.5, timeout: 0, stallTimeout: 0, connectionTimeout: 0 };
    player.configure({
      streaming: { bufferingGoal: cfg.buffer, rebufferingGoal: 0, bufferBehind: 30, retryParameters: retry },
      manifest: { retryParameters: { ...retry, maxAttempts: 2 } },
    });
    player.addEventListener('mediaqualitychanged', e => {
      const m = e.mediaQuality;
      if (m && m.contentType === 'video') setKbps(m.bandwidth, 'rendered');
    });
    player.addEventListener('variantchanged', () => {
      if (kbps === null) currentKbps();
    });
    player.addEventListener('error', e => {
      const d = e.detail || {};
      const data = d.data || [];
      // Severity 2 is CRITICAL: the player stopped. Shaka reports a
      // segment that keeps answering 4xx (1001 BAD_HTTP_STATUS, data
      // [uri, status, ...]) as recoverable and then waits forever: a
      // missing segment cannot appear by retrying, so it is fatal here.
      const missing = d.code === 1001 && data[1] >= 400 && data[1] < 500;
      error(`Shaka error ${d.code} (severity ${d.severity}): ${JSON.stringify(data.slice(0, 2))}`, d.severity === 2 || missing);
    });
    await player.load(cfg.mpd);
    await video.play();
  }

  window.braidPlayback = {
    config: cfg,
    log: () => {
      poll();
      const out = JSON.parse(JSON.stringify(log));
      out.buffer_now_s = bufferLevel();
      // An open stall counts up to now.
      if (stall) out.stalls.push({ start_s: stall.start_s, duration_s: now() - stall.start_s, open: true });
      return out;
    },
  };

  setInterval(poll, POLL_S * 1000);
  setInterval(sampleBuffer, BUFFER_SAMPLE_S * 1000);
  const start = { dashjs: startDashjs, shaka: startShaka }[cfg.player];
  if (!start) error(`player=${cfg.player}: expected dashjs or shaka`, true);
  else start().catch(e => {
    // Shaka rejects with a shaka.util.Error: its code and data say what failed.
    const detail = e && e.code !== undefined ? ` (code ${e.code}, data ${JSON.stringify(e.data || [])})` : '';
    error(`${cfg.player}: ${e && e.message || e}${detail}`, true);
  });
})();
