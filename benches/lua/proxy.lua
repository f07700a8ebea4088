-- wrk script for forward proxies: wrk connects to the proxy (the URL on the
-- command line) and sends absolute-form requests for the origin given after
-- `--` (wrk -s proxy.lua http://PROXY/ -- http://ORIGIN/path DEPTH). wrk has
-- no proxy mode of its own; without this, it would send origin-form requests
-- a forward proxy cannot route (every answer an error). DEPTH > 1 pipelines.
local batch

init = function(args)
  local target = args[1]
  local depth = tonumber(args[2]) or 1
  -- wrk.format(method, path): the -H headers and the method given on the command line, this target.
  batch = string.rep(wrk.format(nil, target), depth)
end

request = function()
  return batch
end
