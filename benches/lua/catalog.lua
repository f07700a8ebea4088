-- wrk script for the catalog group: cycles through the /nas/ paths listed in a file, one per line
-- (wrk -s catalog.lua URL -- PATHS_FILE), so the load asks many distinct keys instead of one URL.
-- wrk.format() keeps the method and the -H headers (Connection: close) of the command line.
local paths = {}
local index = 0

init = function(args)
  for line in io.lines(args[1]) do
    if line ~= "" then
      paths[#paths + 1] = line
    end
  end
  if #paths == 0 then
    error("no paths in " .. tostring(args[1]))
  end
end

request = function()
  index = index % #paths + 1
  return wrk.format(nil, paths[index])
end
