-- DPCS quota engine, a part of apply.lua and grant.lua (written into them
-- where they say "--[[policy.lua]]", quota.scriptSource): the member's
-- constraints and Evaluate's checks before the limits.
-- In: fam (the family hash's plan, thr, m:<cid>, g), ck (the constraints
-- key), app, category, now (minute of the day), wd (ISO weekday), day
-- (YYYYMMDD). Out: decision, rule (nil, '' when nothing blocks); cc, p1,
-- p2 (the compiled constraints and where their limits end) or c (a hash
-- written by an earlier engine, read whole); windows; for limits.lua and
-- the throttle.
--
-- The compiled constraints (quota/compiled.go), the hash's first fields,
-- and the app and category blocks. #c is
--   <access 0|1><extras 0|1><daily>,<monthly>,<throttle>
-- and #w the time windows: per window, start and end minute as two
-- characters each (48 + m / 40, 48 + m % 40), the days Mon..Sun as seven
-- '0'/'1', the name (the rule key after BLOCK:TIME:, START for the night
-- window) and a space; the night window first, then the rest by key. Read
-- with string.byte and string.find, which make no strings. A hash written
-- by an earlier engine has no #c: it is read whole, and its windows
-- compiled here (malformed ones are ignored).
-- A customer the family does not have is judged on no constraints: a hash
-- its key still holds (SetConstraints on a state lost since, the member
-- then removed in SQL only) is not read, as RemoveMember's deletion had it.
local cf = {false, false, false, false}
if fam[3] == '1' then
  cf = redis.call('HMGET', ck, '#c', '#w', 'BLOCK:APP:' .. app, 'BLOCK:CATEGORY:' .. category)
end
local cc, windows = cf[1], cf[2] or ''
-- Where #c's limits end (p1, p2), or the values read whole (c).
local p1, p2, c
if cc then
  p1 = string.find(cc, ',', 3, true)
  p2 = string.find(cc, ',', p1 + 1, true)
elseif fam[3] ~= '1' then
  c = {}
else
  local flat = redis.call('HGETALL', ck)
  local w = {}
  c = {}
  for i = 1, #flat, 2 do c[flat[i]] = flat[i + 1] end
  local DAY = {MON = 1, TUE = 2, WED = 3, THU = 4, FRI = 5, SAT = 6, SUN = 7}
  for k, v in pairs(c) do
    local night = k == 'BLOCK:TIME:START'
    local sh, sm, eh, em, spec
    if night then
      sh, sm = string.match(v, '^(%d%d)(%d%d)$')
      eh, em = string.match(c['BLOCK:TIME:END'] or '', '^(%d%d)(%d%d)$')
    elseif string.sub(k, 1, 11) == 'BLOCK:TIME:' and k ~= 'BLOCK:TIME:END' then
      sh, sm, eh, em, spec = string.match(v, '^(%d%d)(%d%d)%-(%d%d)(%d%d)@(.+)$')
      if not sh then sh, sm, eh, em = string.match(v, '^(%d%d)(%d%d)%-(%d%d)(%d%d)$') end
    end
    sh, sm, eh, em = tonumber(sh), tonumber(sm), tonumber(eh), tonumber(em)
    if sh and eh and sh <= 23 and sm <= 59 and eh <= 23 and em <= 59 then
      -- Days: "MON-FRI" / "SAT,SUN" / "FRI-MON".
      local set, ok = {1, 1, 1, 1, 1, 1, 1}, true
      if spec then
        set, ok = {0, 0, 0, 0, 0, 0, 0}, false
        for item in string.gmatch(spec, '[^,]+') do
          local a, b = string.match(item, '^(%u+)%-(%u+)$')
          if not a then a, b = item, item end
          local d, j = DAY[a], DAY[b]
          if not d or not j then ok = false break end
          while true do
            set[d] = 1
            if d == j then break end
            d = d % 7 + 1
          end
          ok = true
        end
      end
      if ok then
        local ws, we = sh * 60 + sm, eh * 60 + em
        local e = string.char(48 + math.floor(ws / 40), 48 + ws % 40, 48 + math.floor(we / 40), 48 + we % 40) ..
          table.concat(set) .. string.sub(k, 12) .. ' '
        if night then table.insert(w, 1, e) else w[#w + 1] = e end
      end
    end
  end
  windows = table.concat(w)
end

-- The local time YYYYMMDDHHMM as a number (12 digits, exact), what the
-- exceptions' ends are compared with; made only where one may apply.
local stamp = nil
if fam[3] ~= '1' then
  decision, rule = 'BLOCKED_NOT_MEMBER', 'MEMBERSHIP'
elseif (c and c['BLOCK:ACCESS'] == '1') or (cc and string.byte(cc, 1) == 49) then
  decision, rule = 'BLOCKED_ACCESS', 'BLOCK:ACCESS'
elseif (app ~= '' and cf[3] == '1') or (category ~= '' and cf[4] == '1') then
  -- EXCEPT:APP:<app> = YYYYMMDDHHMM lifts the app's own and its
  -- category's block until then (read on this path only).
  local upto = app ~= '' and redis.call('HGET', ck, 'EXCEPT:APP:' .. app)
  stamp = tonumber(day) * 10000 + math.floor(now / 60) * 100 + now % 60
  if not upto or stamp >= tonumber(upto) then
    if app ~= '' and cf[3] == '1' then
      decision, rule = 'BLOCKED_APP', 'BLOCK:APP:' .. app
    else
      decision, rule = 'BLOCKED_APP', 'BLOCK:CATEGORY:' .. category
    end
  end
end

-- Time windows: is now inside [s, e) on an allowed day? Wrapped windows
-- belong to their start day; s == e is the whole day. The night window
-- wins, then the named window whose name is first byte-wise.
if not decision and windows ~= '' then
  local prev = (wd + 5) % 7 + 1
  local best = nil
  local pos, n = 1, #windows
  while pos < n do
    local a, b, x, y = string.byte(windows, pos, pos + 3)
    local s, e = (a - 48) * 40 + b - 48, (x - 48) * 40 + y - 48
    local stop = string.find(windows, ' ', pos + 11, true)
    local onwd = string.byte(windows, pos + 3 + wd) == 49 -- '1'
    local hit
    if s == e then hit = onwd
    elseif s < e then hit = onwd and now >= s and now < e
    else hit = (now >= s and onwd) or (now < e and string.byte(windows, pos + 3 + prev) == 49) end
    local k = hit and string.sub(windows, pos + 11, stop - 1)
    pos = stop + 1
    if hit then
      if k == 'START' then
        best = k
        break
      elseif best == nil then
        best = k
      else
        -- Byte-wise k < best (Lua's < follows the server's collation locale).
        local less = #k < #best
        for j = 1, math.min(#k, #best) do
          local u, v = string.byte(k, j), string.byte(best, j)
          if u ~= v then less = u < v break end
        end
        if less then best = k end
      end
    end
  end
  if best then
    -- Downtime spares the apps and categories always allowed in it
    -- (ALLOW:APP:<app>, ALLOW:CATEGORY:<c>) and lifts while EXCEPT:TIME =
    -- YYYYMMDDHHMM lasts ("30분 더"): read only when a window holds now.
    local x = redis.call('HMGET', ck, 'EXCEPT:TIME', 'ALLOW:APP:' .. app, 'ALLOW:CATEGORY:' .. category)
    stamp = stamp or tonumber(day) * 10000 + math.floor(now / 60) * 100 + now % 60
    if not ((app ~= '' and x[2] == '1') or (category ~= '' and x[3] == '1') or (x[1] and stamp < tonumber(x[1]))) then
      decision, rule = 'BLOCKED_TIME', 'BLOCK:TIME:' .. best
    end
  end
end
