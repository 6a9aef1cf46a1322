// overworld browser client: draws the world the peer sends over a WebSocket
// and sends back the player's keys and chat. Plain JavaScript, no build step.
'use strict';
(() => {
  const TILE_PX = 24;             // screen pixels per tile
  const MAX_EXTRAPOLATE_MS = 250; // dead-reckon at most this far past a view
  const SNAP_TILES = 3;           // larger corrections jump instead of gliding

  // Everything the page knows; exposed as window.overworld for debugging
  // and for the end-to-end test.
  const state = {
    connected: false,
    selfId: '',
    world: null,
    view: null,
    viewAt: 0,
    maps: new Map(),     // "x,y" -> {size, rev, tiles, canvas}
    shown: new Map(),    // id -> {x, y} smoothed screen position in units
    messages: [],
    sent: 0,
    reconnects: 0,
  };
  window.overworld = state;

  const $ = (id) => document.getElementById(id);
  const canvas = $('world');
  const ctx = canvas.getContext('2d');
  const mini = $('minimap');
  const mctx = mini.getContext('2d');
  const statusEl = $('status');
  const logEl = $('log');
  const chatInput = $('chat-input');

  // ---- connection ---------------------------------------------------------

  let ws = null;
  let attempt = 0;

  function connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    ws = new WebSocket(`${proto}//${location.host}/ws`);
    ws.onopen = () => {
      attempt = 0;
      state.connected = true;
      sendControl();
      updateStatus();
    };
    ws.onmessage = (ev) => {
      let msg;
      try { msg = JSON.parse(ev.data); } catch (e) { return; }
      handle(msg);
    };
    ws.onclose = () => {
      state.connected = false;
      ws = null;
      updateStatus();
      // Exponential backoff with jitter: the peer may be restarting.
      const delay = Math.min(5000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt++;
      state.reconnects++;
      setTimeout(connect, delay);
    };
  }

  function send(obj) {
    if (ws && ws.readyState === WebSocket.OPEN) {
      ws.send(JSON.stringify(obj));
      state.sent++;
      return true;
    }
    return false;
  }

  function handle(msg) {
    switch (msg.type) {
      case 'hello':
        state.selfId = msg.self;
        state.world = msg.world;
        state.maps.clear();   // the peer may have restarted with another world
        state.shown.clear();
        break;
      case 'view':
        for (const m of msg.maps || []) addMap(m);
        state.view = msg.view;
        state.viewAt = performance.now();
        state.world = msg.view.world;
        for (const line of msg.view.messages || []) addMessage(line);
        updateHud();
        updateStatus();
        break;
      case 'error':
        addMessage({ kind: 'system', text: 'Server: ' + msg.error });
        break;
    }
  }

  // ---- input --------------------------------------------------------------

  const held = new Set();
  const KEYS = {
    ArrowLeft: 'left', KeyA: 'left', ArrowRight: 'right', KeyD: 'right',
    ArrowUp: 'up', KeyW: 'up', ArrowDown: 'down', KeyS: 'down',
  };
  let lastMove = '0,0';

  function moveVector() {
    const dx = (held.has('right') ? 1 : 0) - (held.has('left') ? 1 : 0);
    const dy = (held.has('down') ? 1 : 0) - (held.has('up') ? 1 : 0);
    return [dx, dy];
  }

  function sendControl(extra) {
    const move = moveVector();
    lastMove = move.join(',');
    send(Object.assign({ type: 'input', move }, extra || {}));
  }

  document.addEventListener('keydown', (e) => {
    if (document.activeElement === chatInput) {
      if (e.key === 'Escape') { chatInput.blur(); canvas.focus(); }
      return;
    }
    if (e.key === 'Enter') {
      e.preventDefault();
      chatInput.focus();
      return;
    }
    const dir = KEYS[e.code];
    if (dir) {
      e.preventDefault();
      held.add(dir);
      if (moveVector().join(',') !== lastMove) sendControl();
      return;
    }
    if (e.code === 'KeyE' && !e.repeat) sendControl({ eat: true });
    if (e.code === 'KeyF' && !e.repeat) sendControl({ fight: true });
  });
  document.addEventListener('keyup', (e) => {
    const dir = KEYS[e.code];
    if (dir) {
      held.delete(dir);
      if (moveVector().join(',') !== lastMove) sendControl();
    }
  });
  window.addEventListener('blur', () => {
    held.clear();
    if (lastMove !== '0,0') sendControl();
  });

  $('chat-form').addEventListener('submit', (e) => {
    e.preventDefault();
    let text = chatInput.value.trim();
    let to = '';
    const whisper = /^\/w\s+(\S+)\s+(.+)$/.exec(text);
    if (whisper) { to = whisper[1]; text = whisper[2]; }
    if (text && send({ type: 'chat', text, to })) chatInput.value = '';
    chatInput.blur();
    canvas.focus();
  });

  // ---- chat log -----------------------------------------------------------

  function addMessage(m) {
    state.messages.push(m);
    if (state.messages.length > 200) state.messages.shift();
    const div = document.createElement('div');
    div.className = 'line ' + (m.kind || 'system');
    if (m.kind === 'chat' || m.kind === 'whisper') {
      const from = document.createElement('span');
      from.className = 'from';
      from.textContent = m.kind === 'whisper' ? `${m.from} → ${m.to}: ` : `${m.from}: `;
      div.appendChild(from);
    }
    div.appendChild(document.createTextNode(m.text));
    logEl.appendChild(div);
    while (logEl.childNodes.length > 100) logEl.removeChild(logEl.firstChild);
    logEl.scrollTop = logEl.scrollHeight;
    logEl.dataset.count = String(state.messages.length);
  }

  // ---- HUD and status -----------------------------------------------------

  function updateHud() {
    const s = state.view && state.view.self;
    if (!s) return;
    $('name').textContent = s.name;
    $('skill').textContent = `skill ${s.skill}`;
    $('health').style.width = `${Math.max(0, s.health)}%`;
    $('health-n').textContent = s.health;
    $('hunger').style.width = `${Math.max(0, s.hunger)}%`;
    $('hunger-n').textContent = s.hunger;
    $('score').textContent = s.score;
    const banner = $('banner');
    if (!s.alive) { banner.textContent = 'You were defeated — respawning…'; banner.hidden = false; }
    else if (s.hunger >= 100) { banner.textContent = 'Starving! Find food (E)'; banner.hidden = false; }
    else banner.hidden = true;
  }

  function updateStatus() {
    const v = state.view;
    const d = statusEl.dataset;
    d.connected = String(state.connected);
    if (!state.connected) {
      statusEl.textContent = `● disconnected — reconnecting (attempt ${attempt})…`;
      return;
    }
    if (!v) { statusEl.textContent = '● connected, waiting for the world…'; return; }
    const st = v.status;
    d.x = v.self.x; d.y = v.self.y; d.tick = v.tick; d.region = st.region;
    d.health = v.self.health; d.players = (v.players || []).length;
    statusEl.textContent =
      `● ${st.mode} · region ${st.region} · coordinator ${st.coordinator || '?'} · ` +
      `peers ${st.peers} · ${st.latencyMs} ms · tick ${v.tick}`;
    const m = st.mirror;
    if (m) {
      d.mirror = m.mirror; d.rollbacks = m.rollbacks; d.agreeing = String(m.agreeing); d.checkpoint = m.checkpointTick;
      statusEl.textContent = `● mirror ${m.mirror} of ${m.mirrors} · region ${st.region} · ` +
        `rollbacks ${m.rollbacks} (seen ${m.leadingRollbacks}) · hashes ` +
        (m.agreeing ? `agree ✓ (${m.agreed} checks, tick ${m.checkpointTick})` : `DIFFER ✗ (${m.mismatched} mismatches)`) +
        ` · ${st.latencyMs} ms · tick ${m.leadingTick}/${m.confirmedTick}`;
      if (m.protocol === 'event') {
        d.protocol = 'event'; d.decided = m.decided || 0;
        statusEl.textContent += ` · event protocol: ${m.decided || 0} decided (${m.decidedLate || 0} late),` +
          ` ${m.undecided || 0} undecided, ${m.reconciled || 0} guesses taken back`;
      }
    }
    $('map-label').textContent = `world ${v.world.regionsX}×${v.world.regionsY} · you are in ${st.region}`;
  }

  // ---- terrain ------------------------------------------------------------

  // A tiny deterministic hash so tile textures stay put between frames.
  function hash(x, y, s) {
    let h = (x * 374761393 + y * 668265263 + s * 2147483647) | 0;
    h = Math.imul(h ^ (h >>> 13), 1274126177);
    return ((h ^ (h >>> 16)) >>> 0) / 4294967296;
  }

  const FLOOR = ['#cdb68b', '#cab388', '#d0b98e'];
  const GRASS = ['#7aa95a', '#77a657', '#7dac5d'];

  function addMap(m) {
    const c = document.createElement('canvas');
    c.width = c.height = m.size * TILE_PX;
    const g = c.getContext('2d');
    const at = (x, y) => (x < 0 || y < 0 || x >= m.size || y >= m.size) ? '.' : m.tiles[y * m.size + x];
    for (let y = 0; y < m.size; y++) {
      for (let x = 0; x < m.size; x++) {
        const t = at(x, y);
        const px = x * TILE_PX, py = y * TILE_PX;
        const gx = m.x * m.size + x, gy = m.y * m.size + y;
        const r = hash(gx, gy, 1);
        if (t === '#') {
          g.fillStyle = '#4d515c'; g.fillRect(px, py, TILE_PX, TILE_PX);
          g.fillStyle = '#676c79'; g.fillRect(px + 1, py + 1, TILE_PX - 2, TILE_PX - 7);
          g.fillStyle = '#7b8190'; g.fillRect(px + 1, py + 1, TILE_PX - 2, 3);
          g.strokeStyle = 'rgba(0,0,0,0.25)'; g.lineWidth = 1;
          g.beginPath(); g.moveTo(px + (r > 0.5 ? 8 : 15), py + 4); g.lineTo(px + (r > 0.5 ? 8 : 15), py + TILE_PX - 7); g.stroke();
        } else if (t === '~') {
          g.fillStyle = r > 0.5 ? '#3d7dbd' : '#4283c4'; g.fillRect(px, py, TILE_PX, TILE_PX);
          g.strokeStyle = 'rgba(255,255,255,0.35)'; g.lineWidth = 1.5;
          g.beginPath();
          const wy = py + 8 + Math.floor(r * 8);
          g.moveTo(px + 4, wy); g.quadraticCurveTo(px + 8, wy - 3, px + 12, wy); g.quadraticCurveTo(px + 16, wy + 3, px + 20, wy);
          g.stroke();
        } else if (t === ',') {
          g.fillStyle = GRASS[Math.floor(r * 3)]; g.fillRect(px, py, TILE_PX, TILE_PX);
          g.strokeStyle = '#5f8e42'; g.lineWidth = 1;
          for (let k = 0; k < 3; k++) {
            const bx = px + 3 + hash(gx, gy, k + 2) * (TILE_PX - 6), by = py + 5 + hash(gx, gy, k + 7) * (TILE_PX - 8);
            g.beginPath(); g.moveTo(bx, by + 4); g.lineTo(bx - 1.5, by); g.moveTo(bx, by + 4); g.lineTo(bx + 1.5, by); g.stroke();
          }
        } else {
          g.fillStyle = FLOOR[Math.floor(r * 3)]; g.fillRect(px, py, TILE_PX, TILE_PX);
          if (r > 0.7) {
            g.fillStyle = 'rgba(110,85,50,0.35)';
            g.fillRect(px + hash(gx, gy, 3) * 18 + 2, py + hash(gx, gy, 4) * 18 + 2, 3, 2);
          }
        }
      }
    }
    // Wall shadows on the floor below, drawn after all tiles.
    g.fillStyle = 'rgba(0,0,0,0.18)';
    for (let y = 0; y < m.size - 1; y++) {
      for (let x = 0; x < m.size; x++) {
        if (at(x, y) === '#' && at(x, y + 1) !== '#') g.fillRect(x * TILE_PX, (y + 1) * TILE_PX, TILE_PX, 5);
      }
    }
    state.maps.set(`${m.x},${m.y}`, { size: m.size, rev: m.rev, tiles: m.tiles, canvas: c, x: m.x, y: m.y });
  }

  // ---- drawing ------------------------------------------------------------

  // A well-mixed hash of the ID picks one of a set of distinct colours, so
  // players with similar IDs still look different.
  const PALETTE = ['#e6194b', '#3cb44b', '#4363d8', '#f58231', '#911eb4', '#42d4f4',
    '#f032e6', '#bfef45', '#fabed4', '#469990', '#dcbeff', '#9a6324', '#800000', '#000075'];
  function playerColor(id) {
    let h = 2166136261;
    for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619);
    h = Math.imul(h ^ (h >>> 15), 2246822507);
    h ^= h >>> 13;
    return PALETTE[(h >>> 0) % PALETTE.length];
  }

  // Dead reckoning from the last view, then a glide toward that estimate.
  function displayPos(p, now, tickRate) {
    const dt = Math.min(now - state.viewAt, MAX_EXTRAPOLATE_MS);
    const ticks = dt * tickRate / 1000;
    const target = { x: p.x + p.vx * ticks, y: p.y + p.vy * ticks };
    const tu = state.world.tileUnits;
    let s = state.shown.get(p.id);
    if (!s || Math.hypot(target.x - s.x, target.y - s.y) > SNAP_TILES * tu) {
      s = { x: target.x, y: target.y };
    } else {
      s.x += (target.x - s.x) * 0.35;
      s.y += (target.y - s.y) * 0.35;
    }
    state.shown.set(p.id, s);
    return s;
  }

  function roundRect(g, x, y, w, h, r) {
    g.beginPath();
    g.moveTo(x + r, y); g.arcTo(x + w, y, x + w, y + h, r); g.arcTo(x + w, y + h, x, y + h, r);
    g.arcTo(x, y + h, x, y, r); g.arcTo(x, y, x + w, y, r); g.closePath();
  }

  function drawFood(g, x, y, o) {
    g.fillStyle = 'rgba(0,0,0,0.25)';
    g.beginPath(); g.ellipse(x, y + 8, 9, 3.5, 0, 0, Math.PI * 2); g.fill();
    g.fillStyle = '#2f7d32';
    g.beginPath(); g.arc(x, y, 10, 0, Math.PI * 2); g.fill();
    g.fillStyle = '#3f9a42';
    g.beginPath(); g.arc(x - 2, y - 2, 7, 0, Math.PI * 2); g.fill();
    const berries = Math.max(1, Math.min(6, o.amount));
    for (let i = 0; i < berries; i++) {
      const a = i / berries * Math.PI * 2 + 0.4;
      g.fillStyle = '#e0304a';
      g.beginPath(); g.arc(x + Math.cos(a) * 5.5, y + Math.sin(a) * 5.5, 2.8, 0, Math.PI * 2); g.fill();
      g.fillStyle = 'rgba(255,255,255,0.6)';
      g.fillRect(x + Math.cos(a) * 5.5 - 1, y + Math.sin(a) * 5.5 - 1.5, 1.2, 1.2);
    }
  }

  function drawHealthPack(g, x, y) {
    g.fillStyle = 'rgba(0,0,0,0.25)';
    g.beginPath(); g.ellipse(x, y + 8, 9, 3, 0, 0, Math.PI * 2); g.fill();
    roundRect(g, x - 8, y - 8, 16, 15, 3);
    g.fillStyle = '#f7f7f2'; g.fill();
    g.strokeStyle = '#9a9a92'; g.lineWidth = 1; g.stroke();
    g.fillStyle = '#d6293a';
    g.fillRect(x - 1.8, y - 5.5, 3.6, 10);
    g.fillRect(x - 5, y - 2.3, 10, 3.6);
  }

  function drawPlayer(g, x, y, p, isSelf) {
    const r = 11;
    g.fillStyle = 'rgba(0,0,0,0.3)';
    g.beginPath(); g.ellipse(x, y + r - 1, r, 4, 0, 0, Math.PI * 2); g.fill();
    if (!p.alive) {
      g.strokeStyle = '#555'; g.lineWidth = 3;
      g.beginPath(); g.moveTo(x - 6, y - 6); g.lineTo(x + 6, y + 6); g.moveTo(x + 6, y - 6); g.lineTo(x - 6, y + 6); g.stroke();
    } else {
      g.fillStyle = playerColor(p.id);
      g.beginPath(); g.arc(x, y, r, 0, Math.PI * 2); g.fill();
      g.lineWidth = isSelf ? 3 : 1.5;
      g.strokeStyle = isSelf ? '#f4c542' : 'rgba(0,0,0,0.6)';
      g.stroke();
      // Eyes look where the player is going.
      const len = Math.hypot(p.vx, p.vy) || 1;
      const ex = p.vx / len * 3, ey = (p.vx || p.vy) ? p.vy / len * 3 : 2;
      g.fillStyle = '#fff';
      g.beginPath(); g.arc(x - 3.5 + ex, y - 2 + ey, 2.6, 0, Math.PI * 2); g.arc(x + 3.5 + ex, y - 2 + ey, 2.6, 0, Math.PI * 2); g.fill();
      g.fillStyle = '#222';
      g.beginPath(); g.arc(x - 3.5 + ex * 1.3, y - 2 + ey * 1.3, 1.2, 0, Math.PI * 2); g.arc(x + 3.5 + ex * 1.3, y - 2 + ey * 1.3, 1.2, 0, Math.PI * 2); g.fill();
    }
    // Name tag and health bar above.
    g.font = 'bold 12px "DejaVu Sans", sans-serif';
    const w = g.measureText(p.name).width + 10;
    roundRect(g, x - w / 2, y - r - 27, w, 16, 4);
    g.fillStyle = isSelf ? 'rgba(60,45,5,0.8)' : 'rgba(0,0,0,0.6)'; g.fill();
    g.fillStyle = isSelf ? '#f4c542' : '#fff';
    g.textAlign = 'center'; g.textBaseline = 'middle';
    g.fillText(p.name, x, y - r - 19);
    g.fillStyle = 'rgba(0,0,0,0.6)'; g.fillRect(x - 13, y - r - 8, 26, 4);
    g.fillStyle = p.health > 50 ? '#5fd35f' : p.health > 25 ? '#f2c94c' : '#e5484d';
    g.fillRect(x - 13, y - r - 8, 26 * Math.max(0, p.health) / 100, 4);
  }

  function draw(now) {
    requestAnimationFrame(draw);
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth, H = canvas.clientHeight;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
    }
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#15171d';
    ctx.fillRect(0, 0, W, H);
    const v = state.view, world = state.world;
    if (!v || !world) return;
    const tu = world.tileUnits;
    const scale = TILE_PX / tu;
    const self = displayPos(v.self, now, world.tickRate);
    const camX = self.x * scale - W / 2, camY = self.y * scale - H / 2;
    const regionPx = world.regionTiles * TILE_PX;

    for (const m of state.maps.values()) {
      const rx = m.x * regionPx - camX, ry = m.y * regionPx - camY;
      if (rx > W || ry > H || rx + regionPx < 0 || ry + regionPx < 0) continue;
      ctx.drawImage(m.canvas, Math.round(rx), Math.round(ry));
    }
    // Region borders.
    ctx.save();
    ctx.strokeStyle = 'rgba(255,255,255,0.35)'; ctx.setLineDash([6, 6]); ctx.lineWidth = 1;
    for (let i = 0; i <= world.regionsX; i++) {
      const x = Math.round(i * regionPx - camX) + 0.5;
      if (x >= 0 && x <= W) { ctx.beginPath(); ctx.moveTo(x, 0); ctx.lineTo(x, H); ctx.stroke(); }
    }
    for (let j = 0; j <= world.regionsY; j++) {
      const y = Math.round(j * regionPx - camY) + 0.5;
      if (y >= 0 && y <= H) { ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(W, y); ctx.stroke(); }
    }
    ctx.restore();

    for (const o of v.objects || []) {
      const x = o.x * scale - camX, y = o.y * scale - camY;
      if (x < -20 || y < -20 || x > W + 20 || y > H + 20) continue;
      if (o.kind === 'food') drawFood(ctx, x, y, o); else drawHealthPack(ctx, x, y);
    }
    const others = (v.players || []).slice().sort((a, b) => a.y - b.y);
    for (const p of others) {
      const s = displayPos(p, now, world.tickRate);
      const x = s.x * scale - camX, y = s.y * scale - camY;
      if (x < -60 || y < -60 || x > W + 60 || y > H + 60) continue;
      drawPlayer(ctx, x, y, p, false);
    }
    drawPlayer(ctx, self.x * scale - camX, self.y * scale - camY, v.self, true);
    drawMinimap();
  }

  function drawMinimap() {
    const v = state.view, world = state.world;
    const W = mini.width, H = mini.height;
    const cw = W / world.regionsX, ch = H / world.regionsY;
    mctx.fillStyle = '#2a2d36'; mctx.fillRect(0, 0, W, H);
    for (const m of state.maps.values()) {
      mctx.drawImage(m.canvas, m.x * cw, m.y * ch, cw, ch);
    }
    mctx.strokeStyle = 'rgba(255,255,255,0.18)'; mctx.lineWidth = 1;
    for (let i = 0; i <= world.regionsX; i++) { mctx.beginPath(); mctx.moveTo(Math.round(i * cw) + 0.5, 0); mctx.lineTo(Math.round(i * cw) + 0.5, H); mctx.stroke(); }
    for (let j = 0; j <= world.regionsY; j++) { mctx.beginPath(); mctx.moveTo(0, Math.round(j * ch) + 0.5); mctx.lineTo(W, Math.round(j * ch) + 0.5); mctx.stroke(); }
    const unitsX = world.regionsX * world.regionTiles * world.tileUnits;
    const unitsY = world.regionsY * world.regionTiles * world.tileUnits;
    const [rx, ry] = v.status.region.split(',').map(Number);
    mctx.strokeStyle = '#f4c542'; mctx.lineWidth = 2;
    mctx.strokeRect(rx * cw + 1, ry * ch + 1, cw - 2, ch - 2);
    for (const p of v.players || []) {
      mctx.fillStyle = playerColor(p.id);
      mctx.fillRect(p.x / unitsX * W - 1.5, p.y / unitsY * H - 1.5, 3, 3);
    }
    mctx.fillStyle = '#fff';
    mctx.beginPath(); mctx.arc(v.self.x / unitsX * W, v.self.y / unitsY * H, 3, 0, Math.PI * 2); mctx.fill();
  }

  // Re-send the held direction now and then, so a peer that restarted or
  // missed a frame still knows what the player is doing.
  setInterval(() => { if (lastMove !== '0,0') sendControl(); }, 1000);

  connect();
  requestAnimationFrame(draw);
  canvas.focus();
})();
