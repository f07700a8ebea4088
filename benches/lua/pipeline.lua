-- wrk script for HTTP/1.1 pipelining: each write carries DEPTH copies of the
-- request (wrk -s pipeline.lua URL -- DEPTH). wrk counts the requests in the
-- returned buffer and waits for that many responses before writing again, so
-- requests/sec counts responses, and latency is that of a whole batch.
local batch

init = function(args)
  local depth = tonumber(args[1]) or 1
  -- wrk.format() builds one request from -H headers, method and path given on the command line.
  batch = string.rep(wrk.format(), depth)
end

request = function()
  return batch
end
